"""No function in app/ is longer than 80 lines: past that, the next feature gets wedged into
the middle of one (issue 35). A longer one is split into steps that name what they do."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
MAX_LINES = 80


def _too_long(path: Path, root: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(root)
    return [
        f"{where}:{node.lineno} {node.name} ({lines} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_LINES
    ]


def test_no_function_in_app_is_longer_than_80_lines() -> None:
    offenders = [o for path in sorted(APP.rglob("*.py")) for o in _too_long(path, APP.parent)]
    assert not offenders, f"functions over {MAX_LINES} lines:\n" + "\n".join(offenders)


@pytest.mark.parametrize(("body_lines", "flagged"), [(MAX_LINES - 1, False), (MAX_LINES, True)])
def test_the_check_counts_the_def_line_too(tmp_path: Path, body_lines: int, flagged: bool) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(body_lines))
    src = tmp_path / "long.py"
    src.write_text(f"class C:\n    async def step(self) -> None:\n{body}\n", encoding="utf-8")
    assert bool(_too_long(src, tmp_path)) is flagged
