"""Where the encoder's table file goes by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.providers import piece_table


def test_the_cache_follows_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert piece_table.default_cache_dir() == tmp_path / "xdg" / "strata"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert piece_table.default_cache_dir() == tmp_path / "home" / ".cache" / "strata"


def test_without_a_home_the_table_stays_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def nowhere() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(nowhere))
    assert piece_table.default_cache_dir() is None
