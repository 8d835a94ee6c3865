"""Fact extraction as a job: `extract_facts` runs one promotion batch's extraction
(app/services/facts.py). Idempotent: new facts have ids derived from the batch and their
text, and a fact already ended is not ended again."""

from __future__ import annotations

from typing import Any

from app.jobs.registry import JobContext, Registry
from app.services.facts import EXTRACT_FACTS, FactExtractor


def register(registry: Registry, extractor: FactExtractor) -> None:
    async def extract(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        return await extractor.extract(ctx.tenant_id, payload)

    registry.add(EXTRACT_FACTS, extract)
