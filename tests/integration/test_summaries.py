"""Hierarchical summaries on real PostgreSQL and SQLite: a bilingual two-week history →
dailies, weeklies and the essence through the sweep and the job runner; listing, recall of
summaries, late messages, idempotent re-runs, the API's 202/200 and the context section;
and the LLM path against a local stub server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from app.core import periods
from app.services.summaries import SummaryService
from app.settings import Settings
from app.stores.models import User
from tests.conftest import Running, embedded_settings, full_settings, post_messages, turn
from tests.integration.test_rewrite import llm_stub  # noqa: F401 - a fixture

SHANGHAI = "Asia/Shanghai"

# One short exchange per day, English and Chinese, each sentence a fact.
DAYS = [
    ("I started a new job at Acme as a data engineer.", "恭喜！新工作怎么样？"),
    ("我今天去医院体检了，一切正常。", "Good to hear the checkup went well."),
    ("My sister Anna is visiting from Berlin next month.", "好的。"),
    ("我开始学弹钢琴，每周上两节课。", "Piano is a great hobby."),
    ("We adopted a cat named Mochi.", "Mochi is a lovely name!"),
    ("我的车险明年三月到期，需要续保。", "I will remind you in February."),
    ("I ran ten kilometres in the park this morning.", "太棒了！"),
    ("我们计划五月去云南旅行。", "Yunnan is beautiful in May."),
    ("The team shipped the new billing service.", "Congratulations on the launch."),
    ("我周末读完了《三体》。", "What did you think of the ending?"),
]


def history_days(today: date) -> list[date]:
    """Ten closed days: the last three of the week before last and all of last week."""
    last_monday = periods.week_start(today) - timedelta(days=7)
    return [last_monday - timedelta(days=3) + timedelta(days=i) for i in range(10)]


def at(day: date, hour: int) -> str:
    # 03:00-06:00 UTC is late morning in Shanghai, on the same calendar day.
    return datetime.combine(day, time(hour), tzinfo=UTC).isoformat()


async def set_timezone(running: Running, user: str, tz: str) -> None:
    settings = running.resources.settings
    async with running.resources.db.transaction() as tx:
        await tx.execute(
            sa.update(User)
            .where(User.tenant_id == settings.default_tenant, User.id == user)
            .values(profile={"timezone": tz})
        )


async def list_summaries(running: Running, user: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        resp = await running.client.get(f"/v1/users/{user}/summaries", params=query)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items


async def wait_for(check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.3)


@pytest.fixture(scope="module", params=["full", "embedded"])
async def running(
    request: pytest.FixtureRequest,
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    tmp_path_factory: pytest.TempPathFactory,
    start_app: Callable[[Settings], Any],
) -> AsyncIterator[Running]:
    """Apps of their own, on each database: the sweep looks at every user, and should see
    only these tests' (the shared apps hold the whole suite's)."""
    if request.param == "full":
        settings = full_settings(await pg_databases())
    else:
        settings = embedded_settings(tmp_path_factory.mktemp("summaries"))
    async with start_app(settings) as app:
        yield app


def service(running: Running) -> SummaryService:
    summaries: SummaryService = running.state["services"].summaries
    return summaries


async def test_a_bilingual_history_summarised_daily_weekly_and_essence(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, work, home = ids("user"), ids("work"), ids("home")
    today = datetime.now(UTC).date()
    days = history_days(today)
    for i, (day, (said, answer)) in enumerate(zip(days, DAYS, strict=True)):
        session = work if i % 2 else home
        await post_messages(
            running,
            session,
            user,
            [
                turn(said, id=f"d{i}-u", created_at=at(day, 3)),
                turn(answer, role="assistant", id=f"d{i}-a", created_at=at(day, 4)),
            ],
            wait=False,
        )
    await set_timezone(running, user, SHANGHAI)
    svc = service(running)

    # The sweep finds the ten closed days; their jobs run on the app's worker, and each
    # week's last daily queues its weekly, each weekly the essence.
    counts = await svc.sweep(datetime.now(UTC))
    assert counts["daily"] >= 10

    async def complete() -> list[dict[str, Any]] | None:
        items = await list_summaries(running, user)
        levels = [i["level"] for i in items]
        if levels.count("daily") == 10 and levels.count("weekly") == 2 and "essence" in levels:
            essence = next(i for i in items if i["level"] == "essence")
            newest = max(
                (i for i in items if i["level"] == "weekly"), key=lambda w: w["period_start"]
            )
            # A weekly may be written before its week's last daily: that daily then queues
            # it again (and it the essence), so the whole is eventually consistent.
            if len(essence["sources"]) == 2 and len(newest["sources"]) == 7:
                return items
        return None

    items = await wait_for(complete)
    dailies = [i for i in items if i["level"] == "daily"]
    weeklies = [i for i in items if i["level"] == "weekly"]
    assert [i["period_start"] for i in items] == sorted(
        (i["period_start"] for i in items), reverse=True
    )  # newest first
    for d in dailies:
        assert d["timezone"] == SHANGHAI
        assert datetime.fromisoformat(d["period_start"]).hour == 16  # local midnight, UTC
        assert d["tokens"] > 0
        assert d["method"] == "extractive"
        assert {s["message_id"] for s in d["sources"]} <= {
            f"d{i}-{r}" for i in range(10) for r in "ua"
        }
        assert "好的" not in d["content"]  # filler
    chinese = next(d for d in dailies if "d1-u" in {s["message_id"] for s in d["sources"]})
    assert "体检" in chinese["content"]
    last_week = max(weeklies, key=lambda w: w["period_start"])
    assert len(last_week["sources"]) == 7
    assert {s["id"] for s in last_week["sources"]} <= {d["id"] for d in dailies}

    # Pages and filters.
    assert len(await list_summaries(running, user, level="weekly", limit=1)) == 2
    since = await list_summaries(
        running, user, level="daily", **{"from": last_week["period_start"]}
    )
    assert len(since) == 7

    # Recall of summaries, asked about last week.
    lw_start = datetime.fromisoformat(last_week["period_start"])
    resp = await running.client.post(
        "/v1/recall",
        json={
            "user_id": user,
            "query": "What happened last week? 上周发生了什么？",
            "kinds": ["summary"],
            "time_range": {
                "from": lw_start.isoformat(),
                "to": (lw_start + timedelta(days=7)).isoformat(),
            },
            "reinforce": False,
        },
    )
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert results
    assert all(r["kind"] == "summary" for r in results)
    assert last_week["id"] in {r["id"] for r in results}
    # A plain recall finds memories only.
    plain = await running.client.post(
        "/v1/recall", json={"user_id": user, "query": "Mochi", "reinforce": False}
    )
    assert all(r["kind"] == "memory" for r in plain.json()["results"])

    # A re-run with nothing new changes nothing.
    target = dailies[-1]  # the oldest day
    day = date.fromisoformat(target["period_start"][:10]) + timedelta(days=1)  # Shanghai date
    again = await svc.summarize("default", user, "daily", day)
    assert again.changed is False
    assert again.summary is not None
    assert str(again.summary.id) == target["id"]
    assert (
        again.summary.updated_at.isoformat()
        == datetime.fromisoformat(target["updated_at"]).isoformat()
    )

    # A late message for that closed day: the sweep regenerates it (same id, new content).
    await post_messages(
        running,
        home,
        user,
        [turn("I also booked a dentist appointment for Friday.", id="late", created_at=at(day, 5))],
        wait=False,
    )
    assert (await svc.sweep(datetime.now(UTC)))["daily"] >= 1

    async def regenerated() -> dict[str, Any] | None:
        for d in await list_summaries(running, user, level="daily"):
            if d["id"] == target["id"] and "late" in {s["message_id"] for s in d["sources"]}:
                return d
        return None

    late = await wait_for(regenerated)
    assert "dentist" in late["content"]
    assert late["content"] != target["content"]
    assert late["created_at"] == target["created_at"]

    # Context for a session of today: its turns don't reach back, the summaries do.
    now_session = ids("today")
    await post_messages(running, now_session, user, [turn("What should I do this weekend?")])
    resp = await running.client.post(
        f"/v1/sessions/{now_session}/context", json={"user_id": user, "token_budget": 4000}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    shown = body["sections"]["summaries"]
    assert shown
    levels = [s["level"] for s in shown]
    # The essence, the weeklies before the oldest daily shown, the dailies: oldest first,
    # newest last, nearest the recent turns.
    assert levels[0] == "essence"
    assert levels == sorted(levels, key=["essence", "weekly", "daily"].index)
    starts = {level: [s["period_start"] for s in shown if s["level"] == level] for level in levels}
    assert starts["daily"] == sorted(starts["daily"])
    assert len(starts["daily"]) == min(10, running.resources.settings.summary_context_dailies)
    oldest_daily = datetime.fromisoformat(starts["daily"][0])
    assert all(
        datetime.fromisoformat(w) + timedelta(days=7) <= oldest_daily
        for w in starts.get("weekly", [])
    )
    assert "## Earlier, in summary" in body["text"]
    assert body["tokens"]["total"] <= 4000
    small = await running.client.post(
        f"/v1/sessions/{now_session}/context", json={"user_id": user, "token_budget": 60}
    )
    assert small.status_code == 200
    assert small.json()["tokens"]["total"] <= 60


async def test_post_summarize_is_a_job_then_the_current_summary(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    await post_messages(
        running,
        session,
        user,
        [
            turn("I moved to Lisbon in March.", created_at=at(yesterday, 9)),
            turn("我在里斯本找到了一套公寓。", created_at=at(yesterday, 10)),
        ],
        wait=False,
    )
    first = await running.client.post("/v1/summarize", json={"user_id": user, "level": "daily"})
    assert first.status_code == 202, first.text
    job_id = first.json()["job_id"]
    assert first.json()["key"] == f"{user}:daily@{yesterday.isoformat()}"

    async def done() -> dict[str, Any] | None:
        job = (await running.client.get(f"/v1/jobs/{job_id}")).json()
        return job if job["state"] == "succeeded" else None

    job = await wait_for(done)
    assert job["result"]["changed"] is True
    assert job["result"]["tokens"] > 0

    second = await running.client.post("/v1/summarize", json={"user_id": user, "level": "daily"})
    assert second.status_code == 200, second.text
    assert second.json()["id"] == job["result"]["id"]
    assert "Lisbon" in second.json()["content"]

    future = await running.client.post(
        "/v1/summarize",
        json={"user_id": user, "level": "daily", "period_start": "2999-01-01"},
    )
    assert future.status_code == 422
    assert future.json()["code"] == "period_not_started"
    bad = await running.client.post("/v1/summarize", json={"user_id": user, "level": "monthly"})
    assert bad.status_code == 422
    cursor = await running.client.get(f"/v1/users/{user}/summaries", params={"cursor": "x!"})
    assert cursor.status_code == 422
    assert cursor.json()["code"] == "invalid_cursor"


async def test_an_unknown_timezone_is_utc(running: Running, ids: Callable[[str], str]) -> None:
    user, session = ids("user"), ids("session")
    day = datetime.now(UTC).date() - timedelta(days=2)
    await post_messages(
        running, session, user, [turn("I planted tomatoes.", created_at=at(day, 12))], wait=False
    )
    await set_timezone(running, user, "Mars/Olympus_Mons")
    outcome = await service(running).summarize("default", user, "daily", day)
    assert outcome.summary is not None
    assert outcome.changed
    assert outcome.summary.timezone == "UTC"
    assert outcome.summary.period_start == datetime.combine(day, time(), tzinfo=UTC)


async def test_llm_summaries_are_used_and_fall_back(
    llm_stub: tuple[str, list[Any], list[str]],  # noqa: F811
    start_app: Callable[..., Any],
    tmp_path: Path,
    ids: Callable[[str], str],
) -> None:
    url, answers, prompts = llm_stub
    settings = embedded_settings(
        tmp_path,
        llm_url=url,
        llm_model="stub",
        llm_max_attempts=1,
        # No worker, so no job consumes the stub's answers (not Edge: its shard needs one).
        worker_in_process=False,
        qdrant_url=":memory:",
    )
    async with start_app(settings) as running:
        app: Running = running
        user, session = ids("user"), ids("session")
        day = datetime.now(UTC).date() - timedelta(days=3)
        await post_messages(
            app,
            session,
            user,
            [
                turn("我下个月要去东京出差。", created_at=at(day, 8)),
                turn("Remember to pack the charger.", role="assistant", created_at=at(day, 9)),
            ],
            wait=False,
        )
        svc = service(app)
        answers[:] = [{"summary": "用户下个月去东京出差。"}]
        good = await svc.summarize("default", user, "daily", day)
        assert good.summary is not None
        assert good.summary.method == "llm"
        assert good.summary.content == "用户下个月去东京出差。"
        assert good.llm_usage == {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "total_tokens": 49,
            "calls": 1,
        }
        assert good.summary.llm_usage == good.llm_usage
        assert "东京" in prompts[-1]

        # The weekly from that daily: the model is down, the extractive summary stands in.
        answers[:] = [503]
        weekly = await svc.summarize("default", user, "weekly", day)
        assert weekly.summary is not None
        assert weekly.summary.method == "extractive"
        assert "东京" in weekly.summary.content
        # An empty answer is refused too.
        answers[:] = [{"summary": "   "}]
        essence = await svc.summarize("default", user, "essence", None)
        assert essence.summary is not None
        assert essence.summary.method == "extractive"


async def test_the_sweep_waits_for_a_day_to_close(
    running: Running, ids: Callable[[str], str]
) -> None:
    """An explicit `now`: today's messages are left alone until today has ended."""
    from app.jobs.catalog import build_registry
    from app.stores.models import Job

    user, session = ids("user"), ids("session")
    now = datetime.now(UTC)
    await post_messages(
        running, session, user, [turn("I repainted the kitchen blue.", created_at=now.isoformat())]
    )
    svc = service(running)
    key = f"{user}:daily@{now.date().isoformat()}"

    async def job_keys() -> set[str]:
        async with running.resources.db.read() as tx:
            rows = await tx.execute(sa.select(Job.key).where(Job.key.like(f"{user}:%")))
        return set(rows.scalars())

    await svc.sweep(now + timedelta(seconds=1))
    assert await job_keys() == set()  # today is still open
    tomorrow = datetime.combine(now.date() + timedelta(days=1), time(), tzinfo=UTC)
    await svc.sweep(tomorrow + timedelta(minutes=5))
    assert key in await job_keys()

    registry = build_registry(
        running.resources.settings,
        jobs=running.state["container"].services.jobs,
        summary_service=svc,
    )
    sweep = next(s for s in registry.schedules if s.name == "summaries_sweep")
    assert sweep.every == timedelta(hours=1)
    assert {"summarize", "summaries_sweep"} <= registry.kinds


async def test_deleting_a_session_removes_and_regenerates_its_summaries(
    running: Running, ids: Callable[[str], str]
) -> None:
    """Two sessions on one day and one more day of the deleted session alone: the delete
    takes the dailies quoting it, the weekly citing them and the essence; the queued jobs
    give the shared day its daily back, without the deleted session, and the other day
    none."""
    from app.stores.models import Job

    user, gone, kept = ids("user"), ids("gone"), ids("kept")
    day = datetime.now(UTC).date() - timedelta(days=2)
    alone = day - timedelta(days=1)
    await post_messages(
        running,
        gone,
        user,
        [
            turn("I adopted a parrot named Kiwi.", created_at=at(day, 3)),
            turn("Kiwi can whistle the national anthem.", created_at=at(alone, 3)),
        ],
        wait=False,
    )
    await post_messages(
        running,
        kept,
        user,
        [turn("I bought a red bicycle for commuting.", created_at=at(day, 5))],
        wait=False,
    )
    svc = service(running)
    daily = (await svc.summarize("default", user, "daily", day)).summary
    other = (await svc.summarize("default", user, "daily", alone)).summary
    weekly = (await svc.summarize("default", user, "weekly", day)).summary
    essence = (await svc.summarize("default", user, "essence", None)).summary
    assert daily is not None
    assert other is not None
    assert weekly is not None
    assert essence is not None
    assert "Kiwi" in daily.content
    assert "bicycle" in daily.content
    assert "Kiwi" in weekly.content

    resp = await running.client.delete(f"/v1/sessions/{gone}", params={"user_id": user})
    assert resp.status_code == 200, resp.text
    assert resp.json()["messages"] == 2
    assert resp.json()["summaries"] == 4  # two dailies, the weekly, the essence

    def quotes_gone(s: dict[str, Any]) -> bool:
        cited = {src.get("session_id") for src in s["sources"]}
        return "Kiwi" in s["content"] or gone in cited

    # Gone at once (jobs may already be bringing them back, without it).
    assert not any(quotes_gone(s) for s in await list_summaries(running, user))

    async def settled() -> list[dict[str, Any]] | None:
        async with running.resources.db.read() as tx:
            states = (
                await tx.execute(sa.select(Job.state).where(Job.key.like(f"{user}:%")))
            ).scalars()
            if any(state in ("queued", "running") for state in states):
                return None
        items = await list_summaries(running, user)
        levels = sorted(i["level"] for i in items)
        return items if levels == ["daily", "essence", "weekly"] else None

    items = await wait_for(settled)
    back = next(i for i in items if i["level"] == "daily")
    assert back["id"] == str(daily.id)  # the same period's id, rewritten
    assert "bicycle" in back["content"]
    assert {s["session_id"] for s in back["sources"]} == {kept}
    assert str(other.id) not in {i["id"] for i in items}  # that day has nothing left
    again = next(i for i in items if i["level"] == "weekly")
    assert [s["id"] for s in again["sources"]] == [back["id"]]
    assert not any(quotes_gone(s) for s in items)

    recall = await running.client.post(
        "/v1/recall",
        json={
            "user_id": user,
            "query": "parrot named Kiwi whistles the anthem",
            "kinds": ["summary"],
            "reinforce": False,
        },
    )
    assert recall.status_code == 200, recall.text
    found = recall.json()["results"]
    assert not any("Kiwi" in r["content"] for r in found)
    assert {r["id"] for r in found} <= {i["id"] for i in items}


async def test_a_weekly_asked_for_in_the_open_week_follows_its_daily(
    running: Running, ids: Callable[[str], str]
) -> None:
    """A weekly of the open week that someone asked for before its daily existed finds
    nothing; when the daily is written, its job queues that weekly again. A week nobody
    asked for waits for its close, as before."""
    from app.stores.models import Job

    svc = service(running)
    tenant = running.resources.settings.default_tenant
    sent = datetime.now(UTC) - timedelta(minutes=1)
    day = sent.date()
    monday = periods.week_start(day)
    asked, quiet = ids("asked"), ids("quiet")
    for user in (asked, quiet):
        await post_messages(
            running,
            f"s-{user}",
            user,
            [turn("I planted tomatoes on the balcony.", created_at=sent.isoformat())],
            wait=False,
        )

    async def states(user: str) -> dict[str, str]:
        async with running.resources.db.read() as tx:
            rows = (
                await tx.execute(sa.select(Job.key, Job.state).where(Job.key.like(f"{user}:%")))
            ).all()
        return {str(key): str(state) for key, state in rows}

    def done(user: str, level: str, first: date) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            key = periods.job_key(user, level, first)  # type: ignore[arg-type]
            return (await states(user)).get(key) == "succeeded"

        return check

    await svc.enqueue(tenant, asked, "weekly", monday)
    await wait_for(done(asked, "weekly", monday))
    assert await list_summaries(running, asked, level="weekly") == []  # no daily yet

    for user in (asked, quiet):
        await svc.enqueue(tenant, user, "daily", day)

    async def weekly_back() -> list[dict[str, Any]] | None:
        found = await list_summaries(running, asked, level="weekly")
        return found or None

    weekly = (await wait_for(weekly_back))[0]
    daily = (await list_summaries(running, asked, level="daily"))[0]
    assert [s["id"] for s in weekly["sources"]] == [daily["id"]]

    await wait_for(done(quiet, "daily", day))
    assert periods.job_key(quiet, "weekly", monday) not in await states(quiet)
    assert await list_summaries(running, quiet, level="weekly") == []
