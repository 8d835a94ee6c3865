"""TypeScript types generated from the checked-in OpenAPI document (openapi-typescript)
type-check the example in clients/typescript, and a field the schema lacks fails the check
(docs/clients.md). Node and npm are required: without them this fails, it does not skip."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
pytestmark = pytest.mark.e2e


def _run(*args: str, cwd: Path = PROJECT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def schema() -> Path:
    """The project installed as locked (`npm ci`, once) and `schema.d.ts` generated."""
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the TypeScript client check"
    installed = PROJECT / "node_modules" / ".package-lock.json"
    lock = PROJECT / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = _run(npm, "ci", "--no-audit", "--no-fund")
        assert done.returncode == 0, done.stdout + done.stderr
    done = _run(npm, "run", "--silent", "generate")
    assert done.returncode == 0, done.stdout + done.stderr
    return PROJECT / "schema.d.ts"


def _tsc(project: Path) -> subprocess.CompletedProcess[str]:
    return _run(str(PROJECT / "node_modules" / ".bin" / "tsc"), "--noEmit", "-p", str(project))


def test_the_example_type_checks_against_the_generated_types(schema: Path) -> None:
    assert "RecallResponse" in schema.read_text()
    done = _tsc(PROJECT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_field_the_schema_lacks_fails_the_check(schema: Path, tmp_path: Path) -> None:
    example = (PROJECT / "example.ts").read_text()
    assert "result.content," in example
    (tmp_path / "example.ts").write_text(example.replace("result.content,", "result.contents,"))
    for name in ("tsconfig.json", "schema.d.ts"):
        shutil.copy(PROJECT / name, tmp_path / name)
    done = _tsc(tmp_path)
    assert done.returncode != 0
    assert "Property 'contents' does not exist" in done.stdout, done.stdout + done.stderr
