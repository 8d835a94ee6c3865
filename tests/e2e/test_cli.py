"""`strata` against a live server started by `strata serve`, with keys: import, export,
recall, keys, jobs and reindex over HTTP; and an embedded command refused while the server
holds the data directory (docs/cli.md)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner, Result

from app.cli import cli
from tests.e2e.serving import clean_env, free_port, serving

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-secret-for-cli-tests"
pytestmark = pytest.mark.e2e


def _env(**extra: str) -> dict[str, str | None]:
    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith("STRATA_")}
    return {**cleared, **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`strata serve` on a port, keys required; its URL and data directory."""
    port = free_port()
    data_dir = tmp_path_factory.mktemp("cli-data")
    env = clean_env(STRATA_DATA_DIR=str(data_dir), STRATA_AUTH_MODE="keys", STRATA_ADMIN_KEY=ADMIN)
    log = tmp_path_factory.mktemp("cli-log") / "server.log"
    command = [str(ROOT / ".venv/bin/strata"), "serve", "--port", str(port)]
    with serving(command, port, env, log) as url:
        yield url, data_dir


def _strata(*args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=_env(**env))


def _tenant_key(url: str) -> str:
    made = _strata(
        "keys", "create", "--scopes", "read,write,admin", "--name", "ops", "--url", url,
        "--key", ADMIN,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    return made.stdout.strip()


def test_import_export_and_recall_over_http_with_a_key(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = server
    key = _tenant_key(url)
    history = tmp_path / "history.jsonl"
    may = "2025-05-02T10:00:0"
    turns = [
        {"role": "user", "content": "I moved to Lisbon last May.", "created_at": f"{may}0Z"},
        {"role": "assistant", "content": "How do you like it?", "created_at": f"{may}5Z"},
        *({"role": "user", "content": f"note {i}"} for i in range(248)),
    ]
    history.write_text("".join(json.dumps(t) + "\n" for t in turns))

    # Over HTTP from the environment (STRATA_URL, STRATA_KEY), in batches of 100.
    done = _strata(
        "import", str(history), "--user", "cli-u", "--session", "trip", "--batch", "100",
        STRATA_URL=url, STRATA_KEY=key,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "(250 accepted, 0 duplicates)" in done.stdout
    assert f"-> {url}" in done.stderr

    out = tmp_path / "cli-u.json"
    exported = _strata("export", "--user", "cli-u", "-o", str(out), "--url", url, "--key", key)
    assert exported.exit_code == 0, exported.output
    assert "1 sessions, 250 messages" in exported.stdout
    doc = orjson.loads(out.read_bytes())
    assert [m["content"] for m in doc["sessions"][0]["messages"]][:2] == [
        "I moved to Lisbon last May.",
        "How do you like it?",
    ]

    waited = httpx.get(
        f"{url}/v1/sessions/trip",
        params={"user_id": "cli-u", "wait": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=200,
    )
    assert waited.json()["indexed_seq"] == 250
    found = _strata("recall", "moving to Lisbon", "--user", "cli-u", "--url", url, "--key", key)
    assert found.exit_code == 0, found.output
    assert "Lisbon" in found.stdout
    assert "2025-05-02 10:00" in found.stdout

    reindexed = _strata("reindex", "--user", "cli-u", "--url", url, "--key", key)
    assert reindexed.exit_code == 0, reindexed.output
    assert "rebuilt" in reindexed.stdout


def test_keys_and_jobs_over_http(server: tuple[str, Path]) -> None:
    url, _ = server
    made = _strata(
        "keys", "create", "--tenant", "acme", "--user", "u-1", "--name", "bot", "--url", url,
        "--key", ADMIN,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    assert token.startswith("sk_strata_")
    key_id = str(uuid.UUID(token.split("_")[2]))

    listed = _strata("keys", "list", "--tenant", "acme", "--url", url, "--key", ADMIN)
    assert listed.exit_code == 0, listed.output
    assert key_id in listed.stdout

    revoked = _strata("keys", "revoke", key_id, "--url", url, "--key", ADMIN)
    assert revoked.exit_code == 0, revoked.output
    assert f"{key_id} revoked at" in revoked.stdout
    refused = _strata("export", "--user", "u-1", "--url", url, "--key", token)
    assert refused.exit_code == 1
    assert "(unauthorized)" in refused.stderr

    missing = _strata("jobs", "show", str(uuid.uuid4()), "--url", url, "--key", _tenant_key(url))
    assert missing.exit_code == 1
    assert "(job_not_found)" in missing.stderr


def test_an_import_on_the_data_directory_is_refused_while_the_server_runs(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, data_dir = server
    history = tmp_path / "h.jsonl"
    history.write_text(json.dumps({"role": "user", "content": "hello"}) + "\n")
    refused = _strata("import", str(history), "--user", "u", STRATA_DATA_DIR=str(data_dir))
    assert refused.exit_code == 1
    assert f"the data directory {data_dir} is in use" in refused.stderr
    assert "(data_dir_in_use)" in refused.stderr
    assert not history.with_name(history.name + ".strata-import.json").exists()
    assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
