"""Query rewriting: `POST /v1/rewrite`, and `rewrite: auto` in recall and context, with the
heuristic and with an LLM (a local OpenAI-compatible stub server)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.conftest import Running, embedded_settings, post_messages, turn
from tests.stubs import serve

INSURANCE_CHAT = [
    turn("我上个月买了一份意外险，保额五十万。", id="ins"),
    turn("好的，意外险一般包括意外医疗和身故伤残。", role="assistant", id="ins-reply"),
    turn("我的车险明年三月到期。", id="car"),
    turn("记得提前续保。", role="assistant", id="car-reply"),
    turn("我上周去医院体检，一切正常。", id="checkup"),
    turn("太好了！", role="assistant", id="checkup-reply"),
    turn("再说回我那份意外险吧。", id="back"),
    turn("好的，您想了解意外险的哪方面？", role="assistant", id="back-reply"),
]


async def test_rewrite_endpoint_resolves_a_chinese_follow_up(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, INSURANCE_CHAT, wait=False)
    resp = await running.client.post(
        "/v1/rewrite", json={"user_id": user, "session_id": session, "query": "那摔伤算吗？"}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["changed"] is True
    assert body["method"] == "heuristic"
    assert "意外险" in body["rewritten"]
    assert body["usage"] is None

    same = await running.client.post(
        "/v1/rewrite",
        json={"user_id": user, "session_id": session, "query": "意外险的保额是多少？"},
    )
    assert same.json() == {
        "query": "意外险的保额是多少？",
        "rewritten": "意外险的保额是多少？",
        "changed": False,
        "method": "none",
        "usage": None,
    }


async def test_rewrite_of_another_users_session_is_404(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, INSURANCE_CHAT[:2], wait=False)
    for who, sid in ((ids("other"), session), (user, ids("missing"))):
        resp = await running.client.post(
            "/v1/rewrite", json={"user_id": who, "session_id": sid, "query": "那摔伤算吗？"}
        )
        assert resp.status_code == 404
        assert resp.json()["code"] == "session_not_found"


async def test_recall_with_a_session_rewrites_a_follow_up(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, INSURANCE_CHAT)

    async def ask(**extra: Any) -> dict[str, Any]:
        resp = await running.client.post(
            "/v1/recall",
            json={"user_id": user, "query": "那摔伤算吗？", "reinforce": False, "top_k": 3} | extra,
        )
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    auto = await ask(session_id=session)
    assert auto["rewritten_query"] is not None
    assert "意外险" in auto["rewritten_query"]
    top_ids = [r["sources"][0]["message_id"] for r in auto["results"]]
    assert {"ins", "ins-reply", "back", "back-reply"} & set(top_ids[:2])

    off = await ask(session_id=session, rewrite="off")
    assert off["rewritten_query"] is None
    # Without a session there are no turns to resolve the follow-up with.
    assert (await ask())["rewritten_query"] is None


async def test_context_rewrites_the_last_user_message(
    running: Running, ids: Callable[[str], str]
) -> None:
    user, session = ids("user"), ids("session")
    await post_messages(running, session, user, [*INSURANCE_CHAT, turn("那摔伤算吗？")])
    resp = await running.client.post(
        f"/v1/sessions/{session}/context", json={"user_id": user, "token_budget": 2000}
    )
    assert resp.status_code == 200, resp.text
    assert "意外险" in (resp.json()["rewritten_query"] or "")
    off = await running.client.post(
        f"/v1/sessions/{session}/context",
        json={"user_id": user, "token_budget": 2000, "rewrite": "off"},
    )
    assert off.json()["rewritten_query"] is None


# --- with an LLM --------------------------------------------------------------------------


def _llm_stub(answers: list[Any], prompts: list[str]) -> FastAPI:
    app = FastAPI()

    async def chat(request: Request) -> Any:
        body = await request.json()
        prompts.append(body["messages"][-1]["content"])
        answer = answers[min(len(prompts) - 1, len(answers) - 1)]
        if isinstance(answer, int):
            return JSONResponse({"error": "stub"}, status_code=answer)
        return {
            "choices": [
                {"message": {"role": "assistant", "content": orjson.dumps(answer).decode()}}
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 9},
        }

    app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    return app


@pytest.fixture
async def llm_stub() -> AsyncIterator[tuple[str, list[Any], list[str]]]:
    answers: list[Any] = []
    prompts: list[str] = []
    async with serve(_llm_stub(answers, prompts)) as url:
        yield url, answers, prompts


async def test_llm_rewrite_is_used_validated_and_falls_back(
    llm_stub: tuple[str, list[Any], list[str]],
    start_app: Callable[..., Any],
    tmp_path: Path,
    ids: Callable[[str], str],
) -> None:
    url, answers, prompts = llm_stub
    settings = embedded_settings(tmp_path, llm_url=url, llm_model="stub", llm_max_attempts=2)
    async with start_app(settings) as running:
        app: Running = running
        user, session = ids("user"), ids("session")
        await post_messages(app, session, user, INSURANCE_CHAT, wait=False)

        async def rewrite(query: str) -> dict[str, Any]:
            resp = await app.client.post(
                "/v1/rewrite", json={"user_id": user, "session_id": session, "query": query}
            )
            assert resp.status_code == 200, resp.text
            body: dict[str, Any] = resp.json()
            return body

        answers[:] = [{"rewritten": "摔伤属于意外险的保障范围吗？"}]
        good = await rewrite("那摔伤算吗？")
        assert good["method"] == "llm"
        assert good["rewritten"] == "摔伤属于意外险的保障范围吗？"
        assert good["usage"] == {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "total_tokens": 49,
            "calls": 1,
        }
        assert "我上个月买了一份意外险" in prompts[-1]  # the conversation went to the model

        # A self-contained query costs no call.
        calls = len(prompts)
        assert (await rewrite("意外险的保额是多少？"))["method"] == "none"
        assert len(prompts) == calls

        # The model names a city the conversation never mentioned: rejected, heuristic used.
        answers[:] = [{"rewritten": "摔伤在Berlin算意外险吗？"}]
        invented = await rewrite("那摔伤算吗？")
        assert invented["method"] == "heuristic"
        assert "意外险" in invented["rewritten"]
        assert invented["usage"]["calls"] == 1  # the call was made, and counted

        # Garbage and outages: the heuristic, never an error.
        answers[:] = [{"wrong": "shape"}]
        assert (await rewrite("那摔伤算吗？"))["method"] == "heuristic"
        answers[:] = [503]
        down = await rewrite("那摔伤算吗？")
        assert down["method"] == "heuristic"
        assert "意外险" in down["rewritten"]
