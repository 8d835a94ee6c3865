"""The graph and the profile without an LLM (issue 39; app/services/graph_extraction.py):
promotion runs the pattern extractor on each user turn and writes entities, bi-temporal
relations and profile facts with their sources in its own transaction, so a `wait=true`
ingest answers with them written; a move ends the old home in both, history kept; the
`graph` maintenance task extracts what was promoted before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from app.services.facts import EXTRACT_FACTS
from app.settings import Settings
from app.stores.models import Job
from tests.conftest import Running, embedded_settings, post_messages, turn

THREE = [
    "My sister Clara lives in Toronto and works at Shopify.",
    "我妹妹晓棠在南京读研。",
    "I am vegetarian and allergic to peanuts.",
]


def z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


async def get(running: Running, path: str, **params: Any) -> Any:
    resp = await running.client.get(path, params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def entity_names(running: Running, user: str, q: str) -> list[str]:
    page = await get(running, f"/v1/users/{user}/graph/entities", q=q)
    return [e["name"] for e in page["items"]]


async def relations(
    running: Running, user: str, entity: str, **params: Any
) -> set[tuple[str, str, str]]:
    body = await get(running, f"/v1/users/{user}/graph/neighbors", entity=entity, **params)
    return {(r["subject"], r["predicate"], r["object"]) for r in body["relations"]}


async def profile_facts(running: Running, user: str) -> list[dict[str, Any]]:
    facts: list[dict[str, Any]] = (await get(running, f"/v1/users/{user}/profile"))["facts"]
    return facts


async def test_three_turns_fill_the_graph_and_the_profile_in_one_pass(
    running: Running, ids: Callable[[str], str]
) -> None:
    assert running.resources.llm is None  # no LLM anywhere: nothing could be called
    user, session = ids("ana"), ids("session")
    await post_messages(
        running, session, user, [turn(text, id=f"m{n}") for n, text in enumerate(THREE)]
    )
    # Written by the promotion pass the ingest waited for: no polling.
    for name in ("Clara", "Toronto", "Shopify", "晓棠", "南京"):
        assert await entity_names(running, user, name) == [name]
    mine = await relations(running, user, "user")
    assert {("user", "sister", "Clara"), ("user", "sister", "晓棠")} <= mine
    assert ("user", "diet", "vegetarian") in mine
    assert ("user", "allergic_to", "peanuts") in mine
    clara = await relations(running, user, "Clara")
    assert {("Clara", "lives_in", "Toronto"), ("Clara", "works_at", "Shopify")} <= clara
    # Each relation cites the message it came from.
    body = await get(running, f"/v1/users/{user}/graph/neighbors", entity="Clara")
    cited = {r["predicate"]: r["sources"] for r in body["relations"]}
    assert cited["lives_in"] == [{"session_id": session, "message_id": "m0", "seq": 1}]
    facts = {f["content"]: f for f in await profile_facts(running, user)}
    assert "The user is vegetarian." in facts
    assert "The user is allergic to peanuts." in facts
    assert "The user's sister is Clara." in facts
    assert facts["The user is vegetarian."]["sources"] == [
        {"session_id": session, "message_id": "m2", "seq": 3}
    ]
    # The LLM path queued nothing.
    async with running.resources.db.read() as tx:
        jobs = await tx.execute(
            sa.select(sa.func.count()).select_from(Job).where(Job.kind == EXTRACT_FACTS)
        )
        assert jobs.scalar_one() == 0
    # The context's profile section shows them.
    resp = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 4000}
    )
    assert resp.status_code == 200, resp.text
    shown = [f["content"] for f in resp.json()["sections"]["profile"]["facts"]]
    assert "The user is allergic to peanuts." in shown


async def test_a_move_ends_the_old_home_in_the_graph_and_the_profile(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("ana"), ids("session")
    now = datetime.now(UTC)
    before, moved = now - timedelta(days=10), now - timedelta(days=5)
    await post_messages(
        running, session, user, [turn("I live in Lisbon.", created_at=before.isoformat())]
    )
    lisbon = next(f for f in await profile_facts(running, user) if "Lisbon" in f["content"])
    await post_messages(
        running, session, user, [turn("Nice weather today.", created_at=moved.isoformat())]
    )
    await post_messages(
        running, session, user, [turn("I moved to Porto.", created_at=moved.isoformat())]
    )
    # The graph: Porto now, Lisbon only as of before the move; the old edge is kept.
    assert ("user", "lives_in", "Porto") in await relations(running, user, "user")
    assert ("user", "lives_in", "Lisbon") not in await relations(running, user, "user")
    then = z(moved - timedelta(days=1))
    assert ("user", "lives_in", "Lisbon") in await relations(running, user, "user", as_of=then)
    assert ("user", "lives_in", "Porto") not in await relations(running, user, "user", as_of=then)
    # The profile: Porto's fact is current; Lisbon's ended when Porto's began, pointing at it.
    contents = [f["content"] for f in await profile_facts(running, user)]
    assert "The user lives in Porto." in contents
    assert "The user lives in Lisbon." not in contents
    porto = next(f for f in await profile_facts(running, user) if "Porto" in f["content"])
    old = await get(running, f"/v1/memories/{lisbon['id']}", user_id=user)
    assert old["valid_to"] == z(moved)
    assert old["superseded_by"] == porto["id"]
    events = (await get(running, f"/v1/memories/{lisbon['id']}/history", user_id=user))["items"]
    assert [e["event"] for e in events] == ["created", "superseded"]
    # Saying it again confirms it: no second relation, no second fact.
    await post_messages(running, session, user, [turn("I live in Porto.")])
    lives = [
        f for f in await profile_facts(running, user) if f["content"].startswith("The user lives")
    ]
    assert [f["content"] for f in lives] == ["The user lives in Porto."]


async def test_nothing_from_questions_wishes_and_negations(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("ana"), ids("session")
    await post_messages(
        running,
        session,
        user,
        [
            turn("Does my sister Clara live in Toronto?"),
            turn("If I moved to Berlin I would need a new job."),
            turn("I don't live in Paris anymore."),
            turn("我打算明年搬到广州。"),
            turn("My sister Clara lives in Toronto.", role="assistant"),
        ],
    )
    assert await profile_facts(running, user) == []
    assert (await get(running, f"/v1/users/{user}/graph/entities"))["items"] == []


async def test_the_graph_task_extracts_what_was_promoted_before(
    tmp_path: Path, start_app: Callable[[Settings], Any], ids: Callable[[str], str]
) -> None:
    user, session = ids("ana"), ids("session")
    settings = embedded_settings(tmp_path, offline_extraction=False)
    async with start_app(settings) as running:
        await post_messages(running, session, user, [turn(text) for text in THREE])
        assert await profile_facts(running, user) == []  # as data imported before
        for _ in range(2):  # twice: the second run writes nothing more
            resp = await running.client.post(
                "/v1/admin/maintenance", json={"task": "graph", "user_id": user}
            )
            assert resp.status_code == 202, resp.text
            job = resp.json()
            while job["state"] in ("queued", "running"):
                await asyncio.sleep(0.1)
                job = await get(running, f"/v1/jobs/{job['id']}")
            assert job["state"] == "succeeded", job
        assert await entity_names(running, user, "Clara") == ["Clara"]
        assert ("Clara", "lives_in", "Toronto") in await relations(running, user, "Clara")
        contents = [f["content"] for f in await profile_facts(running, user)]
        assert sorted(c for c in contents if c == "The user is vegetarian.") == [
            "The user is vegetarian."
        ]
        assert job["result"]["relations"] == 0  # the second run: all there already


async def test_names_merge_per_user(running: Running, ids: Callable[[str], str]) -> None:
    """ "Rui" is "Su Rui" once the user named Su Rui; "Xiaotang" is 晓棠 once linked."""
    user, session = ids("ana"), ids("session")
    await post_messages(
        running,
        session,
        user,
        [turn("My colleague Su Rui joined the team."), turn("我妹妹晓棠也叫Xiaotang。")],
    )
    await post_messages(
        running,
        session,
        user,
        [turn("My colleague Rui lives in Shanghai."), turn("My sister Xiaotang moved to Nanjing.")],
    )
    assert ("Su Rui", "lives_in", "Shanghai") in await relations(running, user, "Su Rui")
    assert ("晓棠", "lives_in", "Nanjing") in await relations(running, user, "晓棠")
    mine = await relations(running, user, "user")
    assert ("user", "colleague", "Rui") not in mine
    assert ("user", "sister", "Xiaotang") not in mine
    assert await entity_names(running, user, "Rui") == ["Su Rui"]
