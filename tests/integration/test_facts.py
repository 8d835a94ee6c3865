"""Fact extraction and reconciliation against a scripted OpenAI-compatible model (the local
stub): a changed fact supersedes the old one, recall ranks the new one first, `as_of`
before the change finds the old one, history shows both; the profile, the context's
profile section and the graph follow. Without an LLM no job is queued (patterns extract)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from app.services.facts import EXTRACT_FACTS
from app.settings import Settings
from app.stores.models import Job
from tests.conftest import Running, embedded_settings, full_settings, post_messages, turn
from tests.stubs import chat_app, serve

CITIES = ("Lisbon", "Porto")


def scripted_model(messages: list[dict[str, str]]) -> dict[str, Any]:
    """A model that reads the prompt as the real one would: a city the user lives in is a
    fact, which updates the fact it is shown about the old city; a sister is a fact and
    two triples. It also 'invents' a fact citing a message not in the batch, which the
    plan must drop."""
    body = orjson.loads(messages[-1]["content"])
    known = body["existing_facts"]
    facts: list[dict[str, Any]] = []
    triples: list[dict[str, Any]] = []
    for m in body["new_messages"]:
        if m["role"] != "user":
            continue
        text, seq = m["content"], m["seq"]
        city = next((c for c in CITIES if c in text), None)
        if city is not None:
            content = f"The user lives in {city}."
            old = next((f for f in known if f["content"].startswith("The user lives in")), None)
            if old is None:
                facts.append({"action": "add", "content": content, "reason": "stated"})
            elif old["content"] == content:
                facts.append({"action": "none", "target": old["label"], "reason": "same"})
            else:
                facts.append(
                    {
                        "action": "update",
                        "target": old["label"],
                        "content": content,
                        "reason": f"the user moved to {city}",
                    }
                )
            facts[-1].update(memory_type="semantic", sources=[seq], importance=0.8)
            triples.append(
                {
                    "subject": "user",
                    "predicate": "lives in",
                    "object": city,
                    "object_type": "city",
                    "sources": [seq],
                    "fact": len(facts) - 1,
                }
            )
        if "sister" in text:
            facts.append(
                {
                    "action": "add",
                    "content": "The user's sister Anna lives in Berlin.",
                    "memory_type": "semantic",
                    "sources": [seq],
                    "reason": "family",
                }
            )
            triples += [
                {"subject": "user", "predicate": "sister", "object": "Anna", "sources": [seq]},
                {"subject": "Anna", "predicate": "lives_in", "object": "Berlin", "sources": [seq]},
            ]
    facts.append(
        {"action": "add", "content": "The user owns a yacht.", "sources": [9999], "reason": "?"}
    )
    return {"facts": facts, "triples": triples}


@pytest.fixture
async def model() -> AsyncIterator[tuple[str, list[list[dict[str, str]]]]]:
    calls: list[list[dict[str, str]]] = []
    async with serve(chat_app(scripted_model, calls)) as url:
        yield url, calls


@pytest.fixture(params=["full", "embedded"])
async def app_with_llm(
    request: pytest.FixtureRequest,
    model: tuple[str, list[list[dict[str, str]]]],
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    tmp_path: Path,
    start_app: Callable[[Settings], Any],
) -> AsyncIterator[tuple[Running, list[list[dict[str, str]]]]]:
    url, calls = model
    llm = {"llm_url": url, "llm_model": "stub", "llm_max_attempts": 1}
    settings = (
        full_settings(await pg_databases(), **llm)
        if request.param == "full"
        else embedded_settings(tmp_path, **llm)
    )
    async with start_app(settings) as running:
        yield running, calls


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 90.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.2)


async def profile_of(app: Running, user: str) -> dict[str, Any]:
    resp = await app.client.get(f"/v1/users/{user}/profile")
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def fact_with(app: Running, user: str, text: str) -> dict[str, Any] | None:
    facts = (await profile_of(app, user))["facts"]
    return next((f for f in facts if text in f["content"]), None)


async def history(app: Running, user: str, memory_id: str) -> list[dict[str, Any]]:
    resp = await app.client.get(f"/v1/memories/{memory_id}/history", params={"user_id": user})
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


async def semantic_recall(app: Running, user: str, **extra: Any) -> list[dict[str, Any]]:
    resp = await app.client.post(
        "/v1/recall",
        json={
            "user_id": user,
            "query": "Where does the user live?",
            "memory_types": ["semantic"],
            "min_relevance": 0,
            "reinforce": False,
            **extra,
        },
    )
    assert resp.status_code == 200, resp.text
    results: list[dict[str, Any]] = resp.json()["results"]
    return results


async def test_a_changed_fact_supersedes_the_old_one(
    app_with_llm: tuple[Running, list[list[dict[str, str]]]], ids: Callable[[str], str]
) -> None:
    app, calls = app_with_llm
    user, session = ids("user"), ids("session")
    now = datetime.now(UTC)
    before, moved = now - timedelta(days=10), now - timedelta(days=5)
    await post_messages(
        app,
        session,
        user,
        [
            turn("I live in Lisbon.", created_at=before.isoformat()),
            turn("Nice city!", role="assistant", created_at=before.isoformat()),
            turn("My sister Anna lives in Berlin.", created_at=before.isoformat()),
        ],
    )
    lisbon = await eventually(lambda: fact_with(app, user, "Lisbon"))
    # One call for the batch of three messages, not one per message.
    assert len(calls) == 1
    sent = orjson.loads(calls[0][-1]["content"])
    assert [m["seq"] for m in sent["new_messages"]] == [1, 2, 3]
    assert lisbon["sources"] == [{"session_id": session, "message_id": "seq:1", "seq": 1}]
    assert lisbon["valid_from"] == before.isoformat().replace("+00:00", "Z")

    await post_messages(
        app, session, user, [turn("I live in Porto now.", created_at=moved.isoformat())]
    )
    porto = await eventually(lambda: fact_with(app, user, "Porto"))
    assert len(calls) == 2
    # The old fact was shown to the model, found by vector similarity.
    shown = orjson.loads(calls[1][-1]["content"])["existing_facts"]
    assert "The user lives in Lisbon." in [f["content"] for f in shown]

    # The profile holds the current fact only; nothing invented (the yacht had no source).
    facts = (await profile_of(app, user))["facts"]
    contents = sorted(f["content"] for f in facts)
    assert contents == ["The user lives in Porto.", "The user's sister Anna lives in Berlin."]

    # The old fact is kept, ended and pointing at its successor.
    old = (await app.client.get(f"/v1/memories/{lisbon['id']}", params={"user_id": user})).json()
    assert old["superseded_by"] == porto["id"]
    assert old["valid_to"] == moved.isoformat().replace("+00:00", "Z")

    # Recall now: the new fact first, the old one not at all.
    results = await semantic_recall(app, user)
    assert lisbon["id"] not in [r["id"] for r in results]
    assert porto["id"] in [r["id"] for r in results]
    # Over every memory (the turns too): the new fact above anything saying Lisbon.
    everything = await semantic_recall(app, user, memory_types=None)
    ranked = [r["content"] for r in everything]
    first_lisbon = next(i for i, c in enumerate(ranked) if "Lisbon" in c)
    assert ranked.index("The user lives in Porto.") < first_lisbon
    # Recall as of a day before the move: the old fact, and not the new one.
    then = await semantic_recall(app, user, as_of=(moved - timedelta(days=1)).isoformat())
    assert lisbon["id"] in [r["id"] for r in then]
    assert porto["id"] not in [r["id"] for r in then]
    # Context's profile section likewise: the facts true now, or true then.
    for as_of, expected in ((None, "Porto"), ((moved - timedelta(days=1)).isoformat(), "Lisbon")):
        resp = await app.client.post(
            f"/v1/sessions/{session}/context",
            json={"user_id": user, "token_budget": 4000, **({"as_of": as_of} if as_of else {})},
        )
        assert resp.status_code == 200, resp.text
        lives = [
            f["content"]
            for f in resp.json()["sections"]["profile"]["facts"]
            if f["content"].startswith("The user lives")
        ]
        assert lives == [f"The user lives in {expected}."]

    # History shows both sides, with the model's reason. The context calls above used the
    # facts, and their reinforcement is written behind, on a timer: a "reinforced" event may
    # or may not have landed yet (CI saw one), and is use, not a change of the fact.
    old_events = [e for e in await history(app, user, lisbon["id"]) if e["event"] != "reinforced"]
    assert [e["event"] for e in old_events] == ["created", "superseded"]
    assert old_events[1]["reason"] == "the user moved to Porto"
    assert old_events[1]["new"]["superseded_by"] == porto["id"]
    new_events = [e for e in await history(app, user, porto["id"]) if e["event"] != "reinforced"]
    assert [e["event"] for e in new_events] == ["created"]
    assert new_events[0]["new"]["supersedes"] == lisbon["id"]

    # The graph moved with the fact: Porto now, Lisbon as of before the move.
    hood = await app.client.get(
        f"/v1/users/{user}/graph/neighbors", params={"entity": "User", "depth": 1}
    )
    assert hood.status_code == 200, hood.text
    names = {n["name"] for n in hood.json()["nodes"]}
    assert {"user", "Porto", "Anna"} <= names
    assert "Lisbon" not in names
    past = await app.client.get(
        f"/v1/users/{user}/graph/neighbors",
        params={"entity": "user", "depth": 2, "as_of": (moved - timedelta(days=1)).isoformat()},
    )
    past_names = {n["name"]: n["depth"] for n in past.json()["nodes"]}
    assert past_names.get("Lisbon") == 1
    assert past_names.get("Berlin") == 2
    assert "Porto" not in past_names

    # Saying the same again confirms the fact: no new fact, a "confirmed" event.
    await post_messages(app, session, user, [turn("Yes, I live in Porto.")])
    await eventually(lambda: _has_event(app, user, porto["id"], "confirmed"))
    assert len((await profile_of(app, user))["facts"]) == 2

    # The context's profile section carries the attributes and the current facts.
    patched = await app.client.patch(
        f"/v1/users/{user}/profile",
        content=orjson.dumps({"name": "Ana", "diet": {"vegetarian": True}}),
        headers={"content-type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200, patched.text
    ctx = await app.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 2000}
    )
    assert ctx.status_code == 200, ctx.text
    section = ctx.json()["sections"]["profile"]
    assert section["attributes"] == {"name": "Ana", "diet": {"vegetarian": True}}
    assert "The user lives in Porto." in [f["content"] for f in section["facts"]]
    assert "The user lives in Lisbon." not in ctx.json()["text"]
    assert "The user lives in Porto." in ctx.json()["text"]


async def _has_event(app: Running, user: str, memory_id: str, event: str) -> bool:
    return event in [e["event"] for e in await history(app, user, memory_id)]


async def test_without_an_llm_no_job_is_queued_and_patterns_extract(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [turn("I live in Lisbon."), turn("I love fado.")])
    # The pattern extractor's facts (tests/integration/test_offline_graph.py), no model's.
    facts = sorted(f["content"] for f in (await profile_of(running, user))["facts"])
    assert facts == ["The user likes fado.", "The user lives in Lisbon."]
    async with running.resources.db.read() as tx:
        jobs = (
            await tx.execute(
                sa.select(sa.func.count()).select_from(Job).where(Job.kind == EXTRACT_FACTS)
            )
        ).scalar_one()
    assert jobs == 0


async def test_deleting_a_session_takes_its_facts_and_relations(
    app_with_llm: tuple[Running, list[list[dict[str, str]]]], ids: Callable[[str], str]
) -> None:
    app, _ = app_with_llm
    user, session, other = ids("user"), ids("session"), ids("other")
    await post_messages(app, session, user, [turn("My sister Anna lives in Berlin.")])
    await post_messages(app, other, user, [turn("I live in Lisbon.")])
    await eventually(lambda: fact_with(app, user, "Anna"))
    await eventually(lambda: fact_with(app, user, "Lisbon"))
    # A triple the caller wrote, without sources, is the caller's and stays.
    resp = await app.client.post(
        f"/v1/users/{user}/graph/triples",
        json={"triples": [{"subject": "user", "predicate": "owns", "object": "Mochi"}]},
    )
    assert resp.status_code == 201, resp.text

    deleted = await app.client.request(
        "DELETE", f"/v1/sessions/{session}", params={"user_id": user}
    )
    assert deleted.status_code == 200, deleted.text
    assert await fact_with(app, user, "Anna") is None
    assert await fact_with(app, user, "Lisbon") is not None
    entities = await app.client.get(f"/v1/users/{user}/graph/entities")
    names = sorted(e["name"] for e in entities.json()["items"])
    assert names == ["Lisbon", "Mochi", "user"]  # Anna and Berlin went with the session
