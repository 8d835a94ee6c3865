"""Every job kind a process registers is declared with a payload model (app/services/
job_kinds.py) that reads the payloads already in the jobs table and writes them back in the
same JSON: a row queued by an earlier release still runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import sqlalchemy as sa

from app.jobs.catalog import build_registry
from app.jobs.registry import Registry
from app.providers.llm import OpenAICompatibleLLM
from app.services.facts import ExtractFacts, FactExtractor
from app.stores.models import Job
from app.wiring import Container, fact_config
from tests.conftest import Running

PERIOD = {"period": "2026-12-06T00:00:00+00:00"}  # as app/jobs/scheduler.py writes it

# Each kind's payloads as its enqueuing site stores them, byte for byte the shapes of the
# releases before the payloads were typed. A new kind adds its own here.
STORED: dict[str, list[dict[str, Any]]] = {
    "purge_finished_jobs": [PERIOD],
    "summaries_sweep": [PERIOD],
    "forget_sweep": [PERIOD],
    "summarize": [
        {"user_id": "u1", "level": "daily", "period_start": "2026-12-05"},
        {"user_id": "u1", "level": "weekly", "period_start": "2026-11-30"},
        {"user_id": "u1", "level": "essence", "period_start": None},
    ],
    "reindex": [{"collection": "strata_memories_v3"}],
    "erase_user": [{"user_id": "u1"}],
    "maintenance": [
        {"task": "forget", "user_id": None, "dry_run": False},
        {"task": "graph", "user_id": "u1", "dry_run": True},
    ],
    "extract_facts": [
        {
            "keys": 2,
            "user_id": "u1",
            "session_id": "s1",
            "incarnation": "0f3c",
            "from_seq": 0,
            "to_seq": 4,
        }
    ],
}


async def _every_kind(running: Running) -> Registry:
    """The container's registry, with fact extraction (which needs an LLM: one that is
    never called)."""
    container: Container = running.state["container"]
    r = container.resources
    client = httpx.AsyncClient(base_url="http://127.0.0.1:9")

    async def promote() -> int:
        return 0

    llm = OpenAICompatibleLLM(client, model="never-called")
    s = container.services
    registry = build_registry(
        r.settings,
        jobs=s.jobs,
        summary_service=s.summaries,
        reindexer=container.reindexer,
        erasure_service=s.erasure,
        forgetting=s.forgetting,
        promote=promote,
        fact_extractor=FactExtractor(r.db, r.vectors, r.embedder, llm, fact_config(r.settings)),
    )
    await client.aclose()
    return registry


async def test_every_registered_kind_round_trips_its_stored_payloads(
    embedded_app: Running,
) -> None:
    registry = await _every_kind(embedded_app)
    assert set(registry.declared) == registry.kinds == set(STORED)
    for name, payloads in STORED.items():
        kind = registry.declared[name]
        for stored in payloads:
            assert kind.load(stored).model_dump(mode="json") == stored, name


async def test_payloads_of_earlier_forms_still_load(embedded_app: Running) -> None:
    registry = await _every_kind(embedded_app)
    # Queued before facts' keys were encoded: no "keys" (its facts keep their legacy ids).
    legacy = {k: v for k, v in STORED["extract_facts"][0].items() if k != "keys"}
    loaded = registry.declared["extract_facts"].load(legacy)
    assert isinstance(loaded, ExtractFacts)
    assert loaded.keys == 1
    # An erasure's row keeps its receipt beside the user once it is written.
    receipt = {"user_id": "u1", "receipt": {"user_id": "u1", "counts": {}}}
    assert registry.declared["erase_user"].load(receipt).model_dump() == {"user_id": "u1"}


async def test_the_jobs_the_app_queued_load_with_their_kinds_model(
    embedded_app: Running,
) -> None:
    """Every row of a declared kind in the app's jobs table (those the other tests and the
    scheduler queued through the services) reads back as its kind's model, unchanged."""
    registry = await _every_kind(embedded_app)
    deadline = time.monotonic() + 30
    while True:  # the in-process scheduler's housekeeping job, at least
        async with embedded_app.resources.db.read() as tx:
            rows = list(await tx.scalars(sa.select(Job).where(Job.kind.in_(registry.kinds))))
        if rows or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert rows
    for row in rows:
        stored = {k: v for k, v in row.payload.items() if k != "receipt"}
        assert registry.declared[row.kind].load(stored).model_dump(mode="json") == stored
