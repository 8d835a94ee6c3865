"""A client generated from the checked-in OpenAPI document (openapi-python-client) reads
the service's error answers into its `Problem` model, not into `None`."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import Running

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
PACKAGE = "strata_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The generated package, imported (generation takes about a second)."""
    out = tmp_path_factory.mktemp("client")
    config = out / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))  # no formatting: nothing reads it
    cli = Path(sys.executable).parent / "openapi-python-client"
    done = subprocess.run(
        [
            str(cli),
            "generate",
            "--path",
            str(SPEC),
            "--output-path",
            str(out / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.partition(".")[0] == PACKAGE]:
            del sys.modules[name]


def _operation(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.api.{name}")


async def test_a_generated_client_parses_problems(
    generated: ModuleType, embedded_app: Running
) -> None:
    client = generated.Client(base_url="http://strata")
    client.set_async_httpx_client(embedded_app.client)  # the app, in process
    problem_model = importlib.import_module(f"{PACKAGE}.models").Problem

    get_session = _operation("sessions.get_session")
    missing = await get_session.asyncio_detailed("no-such-session", client=client, user_id="x")
    assert missing.status_code == 404
    assert isinstance(missing.parsed, problem_model)
    assert missing.parsed.code == "session_not_found"
    assert missing.parsed.request_id == missing.headers["x-request-id"]

    recall = _operation("recall.recall")
    request = importlib.import_module(f"{PACKAGE}.models").RecallRequest
    invalid = await recall.asyncio_detailed(
        client=client, body=request(user_id="u", query="x", top_k=0)
    )
    assert invalid.status_code == 422
    assert isinstance(invalid.parsed, problem_model)
    assert invalid.parsed.code == "validation_error"
    assert [(e.field, e.loc) for e in invalid.parsed.errors] == [("top_k", ["body", "top_k"])]


async def test_a_generated_client_reads_as_its_operations_are_named(
    generated: ModuleType, embedded_app: Running
) -> None:
    """Short names a user calls as they are (`sessions.add_messages`, `recall.recall`,
    `context.get_context`), and the context's token counts as a typed object."""
    client = generated.Client(base_url="http://strata")
    client.set_async_httpx_client(embedded_app.client)
    models = importlib.import_module(f"{PACKAGE}.models")

    added = await _operation("sessions.add_messages").asyncio_detailed(
        "trip",
        client=client,
        body=models.IngestRequest.from_dict(
            {
                "user_id": "ana",
                "messages": [{"role": "user", "content": "I moved to Lisbon last May."}],
                "wait": True,
            }
        ),
    )
    assert added.status_code == 200, added.content
    found = await _operation("recall.recall").asyncio(
        client=client, body=models.RecallRequest(user_id="ana", query="Which city did I move to?")
    )
    assert isinstance(found, models.RecallResponse)
    assert "Lisbon" in found.results[0].content
    context = await _operation("context.get_context").asyncio(
        "trip", client=client, body=models.ContextRequest(user_id="ana", token_budget=500)
    )
    assert isinstance(context, models.ContextResponse)
    assert isinstance(context.tokens, models.ContextTokens)
    assert 0 < context.tokens.total <= 500
    assert context.tokens.recent_messages > 0
