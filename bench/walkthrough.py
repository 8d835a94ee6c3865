"""The README's walk-through: two weeks of a bilingual history, its summaries, working memory,
then one context call, printed section by section with token counts.

    python bench/walkthrough.py --url http://127.0.0.1:8000

Each run uses a fresh user id, so it can run against any server (nothing else is touched).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

# One exchange per day: (user, assistant). English and Chinese, as the user writes.
DAYS = [
    ("I signed up for a Sichuan cooking class on Tuesdays.", "Nice! Sichuan food is bold."),
    ("今天学了麻婆豆腐，花椒放多了。", "下次可以少放一点花椒。"),
    ("My sister Maria is visiting from Lisbon in December.", "Lovely, how long will she stay?"),
    ("她待两个星期，我们想去京都。", "京都十二月很美，记得订酒店。"),
    ("I booked a ryokan in Kyoto for Dec 12-15.", "Great, ryokans fill up fast."),
    ("Budget for the trip is about 8,000 yuan.", "That works for a short stay."),
    ("周末去超市买了郫县豆瓣酱。", "好的，做回锅肉用得上。"),
    ("Cooking class: we made kung pao chicken.", "Did you use dried chilies?"),
    ("Yes, and it was too spicy for me.", "Use fewer next time."),
    ("Maria 不吃辣，我得准备几道清淡的菜。", "可以做清蒸鱼或者番茄炒蛋。"),
    ("I changed the ryokan booking to Dec 13-16 instead.", "Noted, the 13th to the 16th."),
    ("上课学了宫保鸡丁的改良版，不那么辣。", "这个版本适合 Maria。"),
    ("Bought a rail pass for Kyoto and Nara.", "Nara is a good day trip."),
    ("我们计划在奈良喂小鹿。", "记得买鹿仙贝。"),
]
TODAY = [
    ("user", "Maria lands tomorrow morning."),
    ("assistant", "Exciting! Anything left to prepare?"),
    ("user", "What did I book for us, and which dishes can she eat?"),
]


async def wait_job(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    for _ in range(600):
        job: dict[str, Any] = (await client.get(f"/v1/jobs/{job_id}")).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        await asyncio.sleep(0.2)
    raise TimeoutError(job_id)


async def summarize(client: httpx.AsyncClient, user: str, level: str, day: str | None) -> None:
    body: dict[str, Any] = {"user_id": user, "level": level}
    if day is not None:
        body["period_start"] = day
    resp = await client.post("/v1/summarize", json=body)
    resp.raise_for_status()
    if resp.status_code == 202:
        job = await wait_job(client, resp.json()["job_id"])
        assert job["state"] == "succeeded", job


async def main(url: str, budget: int) -> None:
    user = f"walk-{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC).replace(microsecond=0)
    start = (now - timedelta(days=len(DAYS) + 1)).replace(hour=19, minute=0, second=0)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i, (said, answer) in enumerate(DAYS):
            at = start + timedelta(days=i)
            week = "week-1" if i < 7 else "week-2"
            messages = [
                {"role": "user", "content": said, "created_at": at.isoformat()},
                {
                    "role": "assistant",
                    "content": answer,
                    "created_at": (at + timedelta(minutes=1)).isoformat(),
                },
            ]
            resp = await client.post(
                f"/v1/sessions/{user}-{week}/messages",
                json={"user_id": user, "messages": messages, "wait": i == len(DAYS) - 1},
            )
            resp.raise_for_status()
        session = f"{user}-today"
        resp = await client.post(
            f"/v1/sessions/{session}/messages",
            json={
                "user_id": user,
                "wait": True,
                "messages": [{"role": r, "content": c} for r, c in TODAY],
            },
        )
        resp.raise_for_status()
        await client.put(
            f"/v1/sessions/{session}",
            json={"user_id": user, "system_prompt": "You are Mei's helpful assistant."},
        )
        await client.put(
            f"/v1/sessions/{session}/scratchpad",
            json={"user_id": user, "data": {"task": "prepare for Maria's visit"}},
        )
        # Summaries are made by the job runner as periods close; here they are asked for.
        for i in range(len(DAYS)):
            await summarize(client, user, "daily", (start + timedelta(days=i)).date().isoformat())
        for day in {(start + timedelta(days=i)).date().isoformat() for i in (0, 7, 13)}:
            await summarize(client, user, "weekly", day)
        await summarize(client, user, "essence", None)

        ctx = (
            await client.post(
                f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": budget}
            )
        ).json()
    sections = ctx["sections"]
    print(f"user {user}; context for session {session}, token_budget {budget}")
    print(f"rewritten_query: {ctx.get('rewritten_query')}")
    for name in (
        "system_prompt",
        "working_memory",
        "profile",
        "summaries",
        "memories",
        "recent_messages",
    ):
        print(
            f"\n[{name}] {ctx['tokens'].get(name, 0)} tokens, dropped {ctx['dropped'].get(name, 0)}"
        )
        value = sections[name]
        if name == "summaries":
            for s in value:
                print(f"  {s['level']} {s['period_start'][:10]}: {s['content'][:90]}")
        elif name == "memories":
            for m in value:
                print(
                    f"  {m['created_at'][:10]} ({m['scores']['semantic']:.2f}) {m['content'][:80]}"
                )
        elif name == "recent_messages":
            for m in value:
                print(f"  {m['role']}: {m['content'][:90]}")
        elif value:
            print("  " + json.dumps(value, ensure_ascii=False)[:200])
    print(f"\ntotal {ctx['tokens']['total']} of {ctx['token_budget']} ({ctx['tokenizer']})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--budget", type=int, default=800)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.budget))
