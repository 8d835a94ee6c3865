"""Forgetting under the default policy, in simulated time (docs/forgetting.md).

Two studies, each on an embedded app in this process whose reinforcement and forgetting read
a simulated clock (`create_app(clock=...)`), so months pass in minutes:

- `--days 90`: a user chats every day (filler, passing remarks, durable facts, explicit
  "remember"s, in English and Chinese), asks about earlier things (recalls that reinforce),
  now and then notices a forgotten remark and restores it; the sweep runs every night.
  Prints memories per week: created, forgotten, restored, pinned, purged, live.
- `--locomo PATH`: LoCoMo conversations replayed session by session in their own time, twice
  (one user with the nightly sweep, one without); after each session the questions whose
  evidence has been said are asked (every other one, reinforcing), and at the end every
  question is asked again (no reinforcement): R@10 with forgetting on vs off, split by
  whether the question's evidence had been recalled before. Then recall latency with
  reinforcement on and off, interleaved in one run.

Usage: python bench/forgetting.py [--days 90] [--locomo path/to/locomo10.json --conversations 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from asgi_lifespan import LifespanManager

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import fmt, machine_facts, print_machine, summarize
from locomo import load_conversations

from app.main import create_app
from app.settings import Settings
from app.stores.models import Memory, MemoryEvent

JSON = dict[str, Any]
DAY = timedelta(days=1)


class SimClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class App:
    """The embedded app on a temporary directory, its client and its services."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.tmp = tempfile.TemporaryDirectory(prefix="strata-forgetting-")
        settings = Settings(
            _env_file=None,
            data_dir=Path(self.tmp.name),
            worker_poll_seconds=0.1,
            log_level="WARNING",
            forgetting_enabled=True,
        )
        self.app = create_app(settings, clock=clock)
        self.manager = LifespanManager(self.app, startup_timeout=120, shutdown_timeout=60)

    async def __aenter__(self) -> App:
        await self.manager.__aenter__()
        self.state = self.manager._state
        transport = httpx.ASGITransport(app=self.manager.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://strata", timeout=300)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self.manager.__aexit__(None, None, None)
        self.tmp.cleanup()

    @property
    def services(self) -> Any:
        return self.state["services"]

    async def post(self, path: str, body: JSON, expect: int = 200) -> JSON:
        resp = await self.client.post(path, json=body)
        if resp.status_code != expect:
            raise RuntimeError(f"{path}: {resp.status_code} {resp.text[:300]}")
        data: JSON = resp.json()
        return data

    async def flush(self) -> None:
        await self.services.recall.drain()

    async def sweep(self, user_id: str | None = None) -> JSON:
        report = await self.services.forgetting.sweep(
            tenant_id="default" if user_id else None, user_id=user_id, scheduled=user_id is None
        )
        out: JSON = report.as_dict()
        return out

    async def sql(self, stmt: Any) -> list[Any]:
        async with self.state["resources"].db.read() as tx:
            return list((await tx.execute(stmt)).all())


# --------------------------------------------------------------------------- 90 days

FILLER = ["ok", "thanks!", "haha", "好的", "嗯嗯", "got it", "cool", "哈哈", "sure", "收到"]
THINGS = ["bike", "umbrella", "dog", "bus", "cafe", "poster", "tram", "market", "park", "train"]
COLOURS = ["red", "blue", "green", "yellow", "grey", "white", "black", "orange"]
ZH_THINGS = ["地铁", "咖啡店", "公园", "超市", "书店", "小区", "雨伞", "自行车"]
ZH_ADJ = ["很挤", "很安静", "人很多", "关门了", "在装修", "新开的", "很干净", "有点吵"]
NAMES = ["Ana", "Bo", "Chen", "Dara", "Eli", "Fei", "Gus", "Hana", "Ivo", "Jun"]
FOODS = ["jasmine tea", "dark chocolate", "spicy noodles", "oat milk", "sourdough", "dumplings"]
CITIES = ["Lisbon", "Kyoto", "Berlin", "Chengdu", "Oslo", "Lima", "Hanoi", "Porto"]


def remark(rng: random.Random, day: int, n: int) -> str:
    if rng.random() < 0.5:
        return (
            f"Saw a {rng.choice(COLOURS)} {rng.choice(THINGS)} near the "
            f"{rng.choice(THINGS)} today, number {day * 10 + n}."
        )
    return f"今天{rng.choice(ZH_THINGS)}{rng.choice(ZH_ADJ)}，第{day * 10 + n}次了。"


def fact(rng: random.Random, day: int, n: int) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f"I prefer {rng.choice(FOODS)} in the morning, since day {day}."
    if kind == 1:
        return f"我喜欢{rng.choice(['爬山', '游泳', '看书', '做饭'])}，尤其是第{day}天那次。"
    if kind == 2:
        return f"My colleague {rng.choice(NAMES)}{n} moved to {rng.choice(CITIES)} on day {day}."
    return f"I'm going to {rng.choice(CITIES)} for work on day {day + 30}."


def remember_line(rng: random.Random, day: int) -> str:
    if rng.random() < 0.5:
        return f"Remember that my locker code is {rng.randrange(1000, 9999)} (day {day})."
    return f"记住，我的门禁密码是{rng.randrange(1000, 9999)}（第{day}天）。"


async def simulate(days: int, seed: int) -> JSON:
    rng = random.Random(seed)
    start = (datetime.now(UTC) - timedelta(days=days + 30)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    clock = SimClock(start)
    user = "sim-user"
    said: list[tuple[int, str, str]] = []  # (day, kind, text)
    restores = 0
    async with App(clock) as app:
        for day in range(days):
            morning = start + day * DAY + timedelta(hours=9)
            clock.now = morning
            lines: list[tuple[str, str]] = []
            for n in range(10):
                r = rng.random()
                if r < 0.3:
                    lines.append(("filler", rng.choice(FILLER)))
                elif r < 0.7:
                    lines.append(("remark", remark(rng, day, n)))
                elif r < 0.93:
                    lines.append(("fact", fact(rng, day, n)))
                else:
                    lines.append(("remember", remember_line(rng, day)))
            messages = [
                {
                    "id": f"d{day}-{n}",
                    "role": "user" if n % 2 == 0 else "assistant",
                    "content": text,
                    "created_at": (morning + timedelta(minutes=n)).isoformat(),
                }
                for n, (_, text) in enumerate(lines)
            ]
            await app.post(
                f"/v1/sessions/day-{day}/messages",
                {"user_id": user, "messages": messages, "wait": True},
            )
            said.extend((day, kind, text) for kind, text in lines)
            # Questions about earlier things: mostly facts, some passing remarks.
            clock.now = morning + timedelta(hours=8)
            earlier = [s for s in said if s[0] < day and s[1] != "filler"]
            for _ in range(3):
                if not earlier:
                    break
                pool = [s for s in earlier if s[1] != "remark"] or earlier
                target = rng.choice(pool if rng.random() < 0.8 else earlier)
                await app.post("/v1/recall", {"user_id": user, "query": target[2], "top_k": 5})
            # Now and then a remark from weeks ago is missed, found forgotten and restored.
            old = [s for s in said if s[1] == "remark" and day - 40 <= s[0] <= day - 21]
            if old and rng.random() < 0.3:
                wanted = rng.choice(old)[2]
                rows = await app.sql(
                    sa.select(Memory.id).where(
                        Memory.user_id == user,
                        Memory.forgotten_at.is_not(None),
                        Memory.purged_at.is_(None),
                        Memory.content.like(f"%{wanted}%"),
                    )
                )
                if rows:
                    resp = await app.client.post(
                        f"/v1/memories/{rows[0][0]}/restore", params={"user_id": user}
                    )
                    restores += resp.status_code == 200
            await app.flush()
            clock.now = start + (day + 1) * DAY - timedelta(minutes=1)
            await app.sweep()  # the nightly sweep, as the scheduled job runs it
        weekly = await week_table(app, user, start, days)
    return {"days": days, "seed": seed, "restores": restores, "weeks": weekly}


async def week_table(app: App, user: str, start: datetime, days: int) -> list[JSON]:
    created = await app.sql(sa.select(Memory.created_at).where(Memory.user_id == user))
    events = await app.sql(
        sa.select(MemoryEvent.event, MemoryEvent.reason, MemoryEvent.created_at).where(
            MemoryEvent.user_id == user
        )
    )
    weeks = (days + 6) // 7
    table: dict[int, Counter[str]] = defaultdict(Counter)
    for (when,) in created:
        table[(when - start).days // 7]["created"] += 1
    for event, reason, when in events:
        week = (when - start).days // 7
        if event in ("forgotten", "restored", "purged"):
            table[week][event] += 1
        elif event == "updated" and reason and "permanent" in reason:
            table[week]["pinned"] += 1
    rows: list[JSON] = []
    live = 0
    for w in range(weeks):
        c = table[w]
        live += c["created"] - c["forgotten"] + c["restored"]
        rows.append({"week": w + 1, **{k: c[k] for k in _COLUMNS}, "live": live})
    return rows


_COLUMNS = ("created", "forgotten", "restored", "pinned", "purged")


def print_weeks(result: JSON) -> None:
    print(f"\n{result['days']}-day simulation (seed {result['seed']}), default policy")
    print("| week | created | forgotten | restored | pinned | purged | live at end |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["weeks"]:
        print(
            f"| {r['week']} | {r['created']} | {r['forgotten']} | {r['restored']} | "
            f"{r['pinned']} | {r['purged']} | {r['live']} |"
        )
    total = Counter[str]()
    for r in result["weeks"]:
        total.update({k: r[k] for k in _COLUMNS})
    print(
        "| total | " + " | ".join(str(total[k]) for k in _COLUMNS) + f" | "
        f"{result['weeks'][-1]['live'] if result['weeks'] else 0} |"
    )


# --------------------------------------------------------------------------- LoCoMo


async def locomo(path: Path, conversations: int, latency_rounds: int) -> JSON:
    convs = load_conversations(path, conversations)
    clock = SimClock(datetime(2020, 1, 1, tzinfo=UTC))
    users = {"on": "fg-on", "off": "fg-off"}
    asked: dict[tuple[int, int], bool] = {}  # question → its evidence was in the top 10
    async with App(clock) as app:
        for conv in convs:
            sessions = sorted(conv.sessions, key=lambda s: s.created_at)
            said: set[str] = set()
            pending = list(conv.questions)
            for i, session in enumerate(sessions):
                clock.now = session.created_at
                for mode, user in users.items():
                    await app.post(
                        f"/v1/sessions/{mode}-{session.session_id}/messages",
                        {
                            "user_id": f"{user}-{conv.index}",
                            "messages": session.messages,
                            "wait": True,
                        },
                    )
                said.update(m["id"] for m in session.messages)
                clock.now = session.created_at + timedelta(hours=1)
                due = [q for q in pending if all(e in said for e in q.evidence)]
                pending = [q for q in pending if q not in due]
                for q in due:
                    if q.index % 2:  # every other question is asked during the history
                        continue
                    hit = False
                    for mode, user in users.items():
                        data = await app.post(
                            "/v1/recall",
                            {"user_id": f"{user}-{conv.index}", "query": q.question},
                        )
                        if mode == "on":
                            found = {s["message_id"] for r in data["results"] for s in r["sources"]}
                            hit = any(e in found for e in q.evidence)
                    asked[(q.conv, q.index)] = hit
                await app.flush()
                # Nightly sweeps of the forgetting user until the next session.
                until = (
                    sessions[i + 1].created_at
                    if i + 1 < len(sessions)
                    else (session.created_at + 2 * DAY)
                )
                night = session.created_at.replace(hour=23, minute=59)
                while night < until:
                    clock.now = night
                    await app.sweep(f"{users['on']}-{conv.index}")
                    night += DAY
        forgotten = (
            await app.sql(
                sa.select(sa.func.count()).where(
                    Memory.user_id.like(f"{users['on']}-%"), Memory.forgotten_at.is_not(None)
                )
            )
        )[0][0]
        total = (
            await app.sql(sa.select(sa.func.count()).where(Memory.user_id.like(f"{users['on']}-%")))
        )[0][0]
        # Every question at the end, without reinforcement.
        scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        fell: list[JSON] = []  # questions recalled before whose R@10 fell: why
        for conv in convs:
            for q in conv.questions:
                group = (
                    "recalled before"
                    if asked.get((q.conv, q.index))
                    else "asked, not recalled"
                    if (q.conv, q.index) in asked
                    else "never asked"
                )
                per_mode: dict[str, float] = {}
                for mode, user in users.items():
                    data = await app.post(
                        "/v1/recall",
                        {
                            "user_id": f"{user}-{conv.index}",
                            "query": q.question,
                            "reinforce": False,
                        },
                    )
                    found = {s["message_id"] for r in data["results"][:10] for s in r["sources"]}
                    r10 = sum(e in found for e in q.evidence) / len(q.evidence)
                    scores[group][mode].append(r10)
                    scores["all"][mode].append(r10)
                    per_mode[mode] = r10
                if per_mode["on"] < per_mode["off"] and group == "recalled before":
                    fell.append(await evidence_state(app, users["on"], q))
        # Recall latency, reinforcement on and off interleaved in one run, on the
        # no-forgetting users (the same index for both).
        took: dict[str, list[float]] = {"on": [], "off": []}
        questions = [q for c in convs for q in c.questions]
        for _ in range(latency_rounds):
            for n, q in enumerate(questions):
                for reinforce in (True, False) if n % 2 else (False, True):
                    body = {
                        "user_id": f"{users['off']}-{q.conv}",
                        "query": q.question,
                        "reinforce": reinforce,
                    }
                    t0 = time.perf_counter()
                    await app.post("/v1/recall", body)
                    took["on" if reinforce else "off"].append((time.perf_counter() - t0) * 1000)
            await app.flush()
    table = {
        group: {
            mode: {"n": len(v), "r_at_10": sum(v) / len(v) if v else None}
            for mode, v in modes.items()
        }
        for group, modes in scores.items()
    }
    return {
        "conversations": len(convs),
        "memories_forgetting_user": total,
        "forgotten": forgotten,
        "r_at_10": table,
        "latency_ms": {mode: summarize(v) for mode, v in took.items()},
        "fell": fell,
    }


async def evidence_state(app: App, user_prefix: str, q: Any) -> JSON:
    """The state of a question's evidence memories in the forgetting user's store."""
    rows = await app.sql(
        sa.select(
            Memory.content,
            Memory.sources,
            Memory.forgotten_at,
            Memory.access_count,
            Memory.importance,
        ).where(Memory.user_id == f"{user_prefix}-{q.conv}")
    )
    evidence = []
    for content, sources, forgotten_at, access_count, importance in rows:
        ids = {s.get("message_id") for s in sources}
        if ids & set(q.evidence):
            evidence.append(
                {
                    "content": content[:80],
                    "forgotten": forgotten_at is not None,
                    "access_count": access_count,
                    "intrinsic": importance,
                }
            )
    return {"question": q.question, "evidence": evidence}


def print_locomo(result: JSON) -> None:
    print(
        f"\nLoCoMo, {result['conversations']} conversations replayed in their own time: "
        f"{result['forgotten']} of {result['memories_forgetting_user']} memories forgotten"
    )
    print("| questions | n | R@10 forgetting off | R@10 forgetting on |")
    print("|---|---:|---:|---:|")
    for group in ("all", "recalled before", "asked, not recalled", "never asked"):
        row = result["r_at_10"].get(group)
        if row:
            print(
                f"| {group} | {row['off']['n']} | {row['off']['r_at_10']:.3f} | "
                f"{row['on']['r_at_10']:.3f} |"
            )
    for item in result["fell"]:
        print(f"fell: {item['question']}")
        for e in item["evidence"]:
            print(f"    {e}")
    lat = result["latency_ms"]
    print("\nrecall latency in-process (ms), interleaved in one run")
    print("| reinforce | n | p50 | p95 |")
    print("|---|---:|---:|---:|")
    for mode in ("off", "on"):
        s = lat[mode]
        print(f"| {mode} | {s['n']} | {fmt(s['p50'])} | {fmt(s['p95'])} |")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--days", type=int, default=90, help="simulated days (0: skip)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--locomo", type=Path, help="locomo10.json: also run the LoCoMo study")
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--latency-rounds", type=int, default=2)
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    print_machine(machine_facts())
    if args.days > 0:
        t0 = time.monotonic()
        result = await simulate(args.days, args.seed)
        print_weeks(result)
        print(
            f"({time.monotonic() - t0:.0f} s; restores by the simulated agent: "
            f"{result['restores']})"
        )
    if args.locomo is not None:
        t0 = time.monotonic()
        print_locomo(await locomo(args.locomo, args.conversations, args.latency_rounds))
        print(f"({time.monotonic() - t0:.0f} s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
