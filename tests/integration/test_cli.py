"""`strata import` and `strata export` on an embedded data directory: a JSON Lines import
interrupted by Ctrl-C and by a crash resumes from its checkpoint and stores every message
exactly once; Strata's own export and Mem0's import (docs/cli.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.importer import CHECKPOINT_SUFFIX

ROOT = Path(__file__).resolve().parents[2]
STRATA = [sys.executable, "-c", "from app.cli import main; main()"]


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    return {**env, "STRATA_DATA_DIR": str(data_dir), "STRATA_LOG_LEVEL": "WARNING"}


def _runner_env(data_dir: Path) -> dict[str, str | None]:
    """CliRunner's environment: the data directory, and no STRATA_* of the test run."""
    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith("STRATA_")}
    return {**cleared, "STRATA_DATA_DIR": str(data_dir)}


def _history(path: Path, n: int) -> Path:
    """`n` turns over 4 sessions; a third carry their own id, the rest get derived ones,
    and some lines repeat another's content and time (only the line tells them apart)."""
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    with path.open("w") as f:
        for i in range(n):
            line: dict[str, Any] = {
                "session_id": f"s{i * 4 // n}",
                "role": "user" if i % 2 == 0 else "assistant",
                "content": "ok" if i % 10 == 9 else f"turn {i}: I keep a garden of {i % 13} roses",
                "created_at": (t0 + timedelta(minutes=0 if i % 10 == 9 else i)).isoformat(),
            }
            if i % 3 == 0:
                line["id"] = f"m{i}"
            f.write(json.dumps(line) + "\n")
    return path


def _export(data_dir: Path, user: str, out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["export", "--user", user, "-o", str(out)], env=_runner_env(data_dir)
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = orjson.loads(out.read_bytes())
    return doc


def _messages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for s in doc["sessions"] for m in s["messages"]]


def _paused(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`strata import` stopped at its hidden pause, between two confirmed batches."""
    proc = subprocess.Popen(
        [*STRATA, *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        # As in a terminal: a run started in the background (CI) inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # ends at EOF if the process exits without pausing
        seen.append(line)
        if line.strip() == "paused":
            return proc
    proc.wait()
    raise AssertionError("".join(seen))


def test_an_interrupted_import_resumes_and_stores_every_message_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history = _history(tmp_path / "history.jsonl", 2000)
    checkpoint = history.with_name(history.name + CHECKPOINT_SUFFIX)
    args = ["import", str(history), "--user", "ann", "--batch", "100"]

    # Ctrl-C after 5 confirmed batches: the process says where it stopped and exits 130.
    proc = _paused([*args, "--pause-after", "5"], _env(data))
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, rest
    assert "500 of 2,000 messages confirmed" in rest
    assert json.loads(checkpoint.read_text())["position"]["records"] == 500

    # A crash (SIGKILL, no clean-up at all) 3 batches into the resumed run.
    proc = _paused([*args, "--pause-after", "3"], _env(data))
    proc.kill()
    proc.wait(timeout=60)
    assert json.loads(checkpoint.read_text())["position"]["records"] == 800

    result = CliRunner().invoke(cli, args, env=_runner_env(data))
    assert result.exit_code == 0, result.output
    assert "after 800 confirmed messages" in result.stderr
    assert "Imported 1,200 messages (1,200 accepted, 0 duplicates)" in result.stdout
    assert not checkpoint.exists()

    messages = _messages(_export(data, "ann", tmp_path / "ann.json"))
    assert len(messages) == 2000
    assert len({m["id"] for m in messages}) == 2000
    assert {m["content"] for m in messages} >= {"ok", "turn 0: I keep a garden of 0 roses"}
    first = next(m for m in messages if m["id"] == "m0")
    assert first["created_at"].startswith("2025-03-01T00:00:00")

    # Done: a run from the start finds every message stored.
    again = CliRunner().invoke(cli, args, env=_runner_env(data))
    assert again.exit_code == 0, again.output
    assert "(0 accepted, 2,000 duplicates)" in again.stdout


def test_a_strata_export_imports_as_another_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history = _history(tmp_path / "history.jsonl", 300)
    env = _runner_env(data)
    assert CliRunner().invoke(cli, ["import", str(history), "--user", "a"], env=env).exit_code == 0
    exported = tmp_path / "a.json"
    before = _export(data, "a", exported)

    result = CliRunner().invoke(cli, ["import", str(exported), "--user", "b"], env=env)
    assert result.exit_code == 0, result.output
    assert "(strata, 300 messages)" in result.stderr
    assert "(300 accepted, 0 duplicates)" in result.stdout
    after = _export(data, "b", tmp_path / "b.json")

    def shape(doc: dict[str, Any]) -> list[tuple[str, list[tuple[Any, ...]]]]:
        return [
            (
                s["id"],
                [(m["id"], m["role"], m["content"], m["created_at"]) for m in s["messages"]],
            )
            for s in doc["sessions"]
        ]

    assert after["user_id"] == "b"
    assert shape(after) == shape(before)


def test_a_mem0_export_imports_as_dated_messages(tmp_path: Path) -> None:
    data = tmp_path / "data"
    mem0 = tmp_path / "mem0.json"
    memories: list[dict[str, Any]] = [
        {
            "id": "8f6a3c1e-2b4d-4e5f-9a0b-1c2d3e4f5a6b",
            "memory": "Is vegetarian",
            "hash": "abc",
            "metadata": {"source": "chat"},
            "created_at": "2024-07-20T01:30:36.275141-07:00",
            "updated_at": "2024-07-21T09:00:00-07:00",
            "user_id": "alex",
        },
        {"memory": "Lives in Lisbon", "created_at": "2024-07-01T10:00:00", "user_id": "alex"},
    ]
    mem0.write_text(json.dumps({"results": memories}))
    env = _runner_env(data)

    result = CliRunner().invoke(cli, ["import", str(mem0), "--user", "alex"], env=env)
    assert result.exit_code == 0, result.output
    assert "(mem0, 2 messages)" in result.stderr
    assert "(2 accepted, 0 duplicates)" in result.stdout
    again = CliRunner().invoke(cli, ["import", str(mem0), "--user", "alex"], env=env)
    assert "(0 accepted, 2 duplicates)" in again.stdout

    doc = _export(data, "alex", tmp_path / "alex.json")
    assert [s["id"] for s in doc["sessions"]] == ["mem0"]
    lisbon, vegetarian = doc["sessions"][0]["messages"]  # oldest first
    assert lisbon["content"] == "Lives in Lisbon"
    assert lisbon["created_at"].startswith("2024-07-01T10:00:00")  # no offset: read as UTC
    assert vegetarian["id"] == memories[0]["id"]
    assert vegetarian["role"] == "user"
    assert datetime.fromisoformat(vegetarian["created_at"]) == datetime.fromisoformat(
        "2024-07-20T08:30:36.275141+00:00"
    )
    assert vegetarian["metadata"]["source"] == "chat"
    assert vegetarian["metadata"]["mem0"]["updated_at"] == "2024-07-21T09:00:00-07:00"


def test_a_bad_line_is_named_and_nothing_after_it_is_sent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history = tmp_path / "bad.jsonl"
    history.write_text(
        '{"role": "user", "content": "fine"}\n'
        '{"role": "user", "content": "also fine"}\n'
        '{"role": "robot", "content": "not a role"}\n'
    )
    result = CliRunner().invoke(
        cli, ["import", str(history), "--user", "u", "--batch", "1"], env=_runner_env(data)
    )
    assert result.exit_code == 1
    assert "bad.jsonl:3: role:" in result.stderr
    assert "(invalid_file)" in result.stderr
    checkpoint = json.loads(history.with_name(history.name + CHECKPOINT_SUFFIX).read_text())
    assert checkpoint["position"]["records"] == 2  # the run again continues at line 3


@pytest.mark.parametrize("fmt", ["strata", "mem0"])
def test_a_file_not_in_the_format_is_refused_before_anything_opens(
    tmp_path: Path, fmt: str
) -> None:
    history = _history(tmp_path / "h.jsonl", 3)
    result = CliRunner().invoke(
        cli,
        ["import", str(history), "--user", "u", "--format", fmt],
        env=_runner_env(tmp_path / "data"),
    )
    assert result.exit_code == 1
    assert "not a JSON document" in result.stderr
    assert not (tmp_path / "data").exists()


def test_keys_and_reindex_on_the_data_directory(tmp_path: Path) -> None:
    env = _runner_env(tmp_path / "data")
    made = CliRunner().invoke(cli, ["keys", "create", "--tenant", "acme", "--name", "ci"], env=env)
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    assert token.startswith("sk_strata_")
    assert "Keep it now" in made.stderr

    listed = CliRunner().invoke(cli, ["keys", "list", "--tenant", "acme"], env=env)
    assert listed.exit_code == 0, listed.output
    assert token.split("_")[2][:8] in listed.stdout

    rebuilt = CliRunner().invoke(cli, ["reindex", "--dry-run"], env=env)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "would rebuild 0 memories' points" in rebuilt.stdout
