"""docs/configuration.md is generated from the settings (`make config-doc`), lists every one of
them under the variable pydantic-settings reads, and cannot fall behind them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from app.settings import Settings
from app.settings_doc import env_name, group_of, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_checked_in_doc_is_what_the_settings_render() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), "run `make config-doc` and commit it"


def test_every_setting_is_described_and_listed_once() -> None:
    doc = render()
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert doc.count(f"| `{env_name(name, field)}` |") == 1, name


def test_the_listed_variables_are_the_ones_the_settings_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fields = Settings.model_fields
    assert env_name("rrf_k", fields["rrf_k"]) == "STRATA_RRF_K"
    assert env_name("metrics_multiproc_dir", fields["metrics_multiproc_dir"]) == (
        "PROMETHEUS_MULTIPROC_DIR"
    )
    monkeypatch.setenv("STRATA_RRF_K", "7")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    settings = Settings(_env_file=None)
    assert settings.rrf_k == 7
    assert settings.metrics_multiproc_dir == tmp_path


def test_a_setting_without_a_description_is_refused() -> None:
    class Undescribed(Settings):
        worker_new_knob: int = Field(default=1)

    with pytest.raises(ValueError, match="worker_new_knob"):
        render(Undescribed)


def test_settings_are_grouped_by_their_concern() -> None:
    assert group_of("worker_metrics_port") == "Metrics and logs"
    assert group_of("worker_batch_messages") == "Worker and promotion"
    assert group_of("dense_context_weight") == "Worker and promotion"
    assert group_of("dense_weight_cross_language") == "Recall ranking"
    assert group_of("summary_daily_tokens") == "Summaries"
    assert group_of("a_setting_of_a_new_kind") == "Other"
