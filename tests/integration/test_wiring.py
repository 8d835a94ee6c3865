"""Embedded, the api and its in-process worker run on one container (app/wiring.py): the
worker's jobs call the very services the routes use, not copies built beside them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.services.promotion import Promoter
from app.wiring import Container
from tests.conftest import embedded_settings, post_messages, turn


def _spy(
    monkeypatch: pytest.MonkeyPatch, owner: object, method: str, label: str, calls: set[str]
) -> None:
    real: Callable[..., Awaitable[Any]] = getattr(owner, method)

    async def spy(*args: Any, **kwargs: Any) -> Any:
        calls.add(label)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, method, spy)


async def test_the_in_process_worker_runs_on_the_apis_container(
    tmp_path: Path, start_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    workers: list[Container] = []
    promoter = Container.promoter

    def spy_promoter(self: Container, owner: str, stop: asyncio.Event | None = None) -> Promoter:
        workers.append(self)
        return promoter(self, owner, stop)

    monkeypatch.setattr(Container, "promoter", spy_promoter)
    async with start_app(embedded_settings(tmp_path)) as running:
        container: Container = running.state["container"]
        services = container.services
        assert running.state["services"] is services
        assert running.state["resources"] is container.resources
        # The worker asked the api's container for its promoter, and no other container.
        assert workers == [container]
        # One reindexer: the memories', forgetting's and the reindex jobs'.
        assert services.memories.reindexer is container.reindexer
        assert services.forgetting.reindexer is container.reindexer

        calls: set[str] = set()
        _spy(monkeypatch, container.reindexer, "rebuild", "reindex", calls)
        _spy(monkeypatch, services.forgetting, "sweep", "forget", calls)
        _spy(monkeypatch, services.summaries, "sweep", "summarize", calls)
        user = "u-wiring"
        await post_messages(running, "s-wiring", user, [turn("the one container")])
        for task, dry_run in (("reindex", True), ("forget", True), ("summarize", False)):
            resp = await running.client.post(
                "/v1/admin/maintenance", json={"task": task, "user_id": user, "dry_run": dry_run}
            )
            assert resp.status_code == 202, resp.text
            job = resp.json()
            for _ in range(1200):
                job = (await running.client.get(f"/v1/jobs/{job['id']}")).json()
                if job["state"] in ("succeeded", "failed"):
                    break
                await asyncio.sleep(0.05)
            assert job["state"] == "succeeded", job
        # Each job of the in-process worker ran on the api's own service (the schedules'
        # sweeps may have called them too).
        assert calls == {"reindex", "forget", "summarize"}
