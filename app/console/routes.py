"""The console's pages: HTML rendered from the services (`request.state.services`), each
behind the gate's rules (app/console/auth.py). Lists are pages of the services' own cursors:
a user with 100k memories is read 50 at a time. Not part of the OpenAPI."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from pydantic import TypeAdapter, ValidationError
from starlette.templating import Jinja2Templates

from app.console import auth
from app.console.charts import retention_chart
from app.core import forgetting as forgetting_rules
from app.core.auth import Principal
from app.errors import AppError, InvalidInput, Unauthorized
from app.schemas.common import Identifier
from app.schemas.context import ContextRequest
from app.schemas.forgetting import FeedbackRequest
from app.schemas.memories import MemoryPatch
from app.schemas.recall import RecallRequest
from app.services.directory import DirectoryService
from app.settings import Settings
from app.wiring import Services

HERE = Path(__file__).parent
STATIC = {"console.css": "text/css"}
PAGE = 50
DRY_SAMPLE = 2000  # memories the forgetting view's dry run reads (docs/console.md)
LEVELS = ("daily", "weekly", "essence")
ACTIONS = {
    "forget": "Forget this memory (delete it; its history stays readable)",
    "restore": "Restore this forgotten memory",
    "pin": "Pin this memory (the sweep never forgets it)",
    "unpin": "Unpin this memory",
    "used": "Feedback: this memory was used (reinforce it)",
    "useless": "Feedback: this memory was useless (weaken it)",
    "erase": "Erase this user: every session, memory, summary and index point, for good",
}
HEADERS = {
    # Nothing but this service: no script at all, styles and images from here only.
    "Content-Security-Policy": "default-src 'none'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix=auth.PATH, include_in_schema=False)
templates = Jinja2Templates(directory=str(HERE / "templates"))
_ID: TypeAdapter[str] = TypeAdapter(Identifier)


@dataclass(frozen=True, slots=True)
class Who:
    principal: Principal
    services: Services
    settings: Settings
    cookie: str

    @property
    def tenant(self) -> str:
        return self.principal.tenant_id

    @property
    def can_write(self) -> bool:
        return "write" in self.principal.scopes

    @property
    def directory(self) -> DirectoryService:
        return self.services.directory


Build = Callable[[Who], Awaitable[Response]]


def _id(field: str, value: str) -> str:
    try:
        return _ID.validate_python(value)
    except ValidationError as exc:
        raise InvalidInput(field, exc.errors()[0]["msg"]) from None


def _uuid(field: str, value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(field, "must be a memory id") from None


def _secure(response: Response) -> Response:
    response.headers.update(HEADERS)
    return response


def render(request: Request, who: Who | None, name: str, status: int = 200, **ctx: Any) -> Response:
    context = {
        "who": who,
        "csrf": auth.csrf_token(who.cookie) if who else "",
        "can_write": bool(who and who.can_write),
        "qs": lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")}),
        **ctx,
    }
    return _secure(templates.TemplateResponse(request, name, context, status_code=status))


async def _page(
    request: Request, build: Build, *, scope: str = "read", user_id: str | None = None
) -> Response:
    """Identify the caller, check the scope and the user binding, build the page; our
    errors become an error page, a missing or bad key the login page."""
    services: Services = request.state.services
    cookie = request.cookies.get(auth.COOKIE)
    anchor = None
    if services.keys.mode != "keys" and not cookie:
        cookie = anchor = auth.new_anchor()
    who = None
    try:
        principal = await auth.identify(services.keys, request)
        who = Who(principal, services, request.state.settings, cookie or "")
        if user_id is not None:
            user_id = _id("user_id", user_id)
        auth.require(principal, scope, user_id)
        response = await build(who)
    except Unauthorized:
        return _secure(RedirectResponse(f"{auth.PATH}/login", status_code=303))
    except AppError as exc:
        response = render(request, who, "error.html", exc.status, error=exc)
    if anchor is not None:
        _set_cookie(request, response, anchor)
    return _secure(response)


def _set_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        auth.COOKIE,
        value,
        path=auth.PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form, first value of each field (no multipart parser needed)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


# Assets and who.


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC:
        return _secure(Response(status_code=404))
    return _secure(FileResponse(HERE / "static" / name, media_type=STATIC[name]))


@router.get("/login")
async def login_page(request: Request) -> Response:
    return render(request, None, "login.html", mode=request.state.services.keys.mode)


@router.post("/login")
async def login(request: Request) -> Response:
    services: Services = request.state.services
    key = (await _form(request)).get("key", "").strip()
    try:
        principal = await services.keys.authenticate(key or None)
        await services.keys.limit(principal)
    except AppError as exc:
        return render(request, None, "login.html", exc.status, error=exc, mode=services.keys.mode)
    target = f"{auth.PATH}/users/{principal.user_id}" if principal.user_id else f"{auth.PATH}/"
    response = RedirectResponse(target, status_code=303)
    _set_cookie(request, response, key)
    return _secure(response)


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await _form(request)
    response = RedirectResponse(f"{auth.PATH}/login", status_code=303)
    if auth.csrf_ok(request.cookies.get(auth.COOKIE), form.get("csrf")):
        response.delete_cookie(auth.COOKIE, path=auth.PATH)
    return _secure(response)


# Users.


@router.get("")
@router.get("/")
async def users(request: Request, q: str | None = None, cursor: str | None = None) -> Response:
    async def build(who: Who) -> Response:
        if who.principal.user_id is not None:  # a bound key sees its one user
            return RedirectResponse(f"{auth.PATH}/users/{who.principal.user_id}", status_code=303)
        page = await who.directory.users(who.tenant, q or None, cursor, PAGE)
        return render(request, who, "users.html", page=page, q=q or "")

    return await _page(request, build)


@router.get("/users/{user_id}")
async def user(
    request: Request, user_id: str, sessions: str | None = None, jobs: str | None = None
) -> Response:
    async def build(who: Who) -> Response:
        s = who.services
        return render(
            request,
            who,
            "user.html",
            user_id=user_id,
            tab="overview",
            profile=await s.profile.get(who.tenant, user_id),
            sessions=await who.directory.sessions(who.tenant, user_id, sessions, PAGE),
            jobs=await who.directory.jobs(who.tenant, user_id, jobs, 20),
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/sessions/{session_id}")
async def session(
    request: Request, user_id: str, session_id: str, cursor: str | None = None
) -> Response:
    async def build(who: Who) -> Response:
        sid = _id("session_id", session_id)
        page = await who.services.ingest.list_messages(who.tenant, sid, user_id, cursor, None, PAGE)
        return render(
            request, who, "session.html", user_id=user_id, tab="", session_id=sid, page=page
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/memories")
async def memories(
    request: Request,
    user_id: str,
    memory_type: str | None = None,
    cursor: str | None = None,
    done: str | None = None,
) -> Response:
    async def build(who: Who) -> Response:
        kind = memory_type or None
        page = await who.services.memories.list(who.tenant, user_id, kind, cursor, PAGE)
        return render(
            request,
            who,
            "memories.html",
            user_id=user_id,
            tab="memories",
            page=page,
            memory_type=kind or "",
            done=done,
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/summaries")
async def summaries(
    request: Request, user_id: str, level: str | None = None, cursor: str | None = None
) -> Response:
    async def build(who: Who) -> Response:
        if level and level not in LEVELS:
            raise InvalidInput("level", f"one of {', '.join(LEVELS)}")
        page = await who.services.summaries.page(
            who.tenant,
            user_id,
            level=level or None,  # type: ignore[arg-type]  # one of LEVELS
            start_from=None,
            start_to=None,
            cursor=cursor,
            limit=20,
        )
        return render(
            request,
            who,
            "summaries.html",
            user_id=user_id,
            tab="summaries",
            page=page,
            level=level or "",
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/graph")
async def graph(
    request: Request,
    user_id: str,
    q: str | None = None,
    cursor: str | None = None,
    entity: str | None = None,
) -> Response:
    async def build(who: Who) -> Response:
        g = who.services.graph
        page = await g.entities(who.tenant, user_id, q or None, limit=PAGE, cursor=cursor)
        hood = (
            await g.neighbors(who.tenant, user_id, entity[:256], depth=1, as_of=None)
            if entity
            else None
        )
        return render(
            request,
            who,
            "graph.html",
            user_id=user_id,
            tab="graph",
            page=page,
            q=q or "",
            hood=hood,
        )

    return await _page(request, build, user_id=user_id)


def _float(value: str | None, default: float) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        return default


@router.get("/users/{user_id}/recall")
async def recall(request: Request, user_id: str) -> Response:
    """The playground: recall as the REST route runs it (never counted as a use), each
    result's score terms as bars, and the query it searched."""
    p = request.query_params

    async def build(who: Who) -> Response:
        form = {
            "q": p.get("q", ""),
            "semantic": _float(p.get("semantic"), 0.6),
            "recency": _float(p.get("recency"), 0.2),
            "importance": _float(p.get("importance"), 0.2),
            "as_of": p.get("as_of", ""),
            "min_relevance": p.get("min_relevance", ""),
            "top_k": int(_float(p.get("top_k"), 10)),
            "session_id": p.get("session_id", ""),
        }
        out, error = None, None
        if form["q"]:
            body: dict[str, Any] = {
                "user_id": user_id,
                "query": form["q"],
                "top_k": form["top_k"],
                "reinforce": False,
                "weights": {k: form[k] for k in ("semantic", "recency", "importance")},
            }
            if form["as_of"]:
                body["as_of"] = form["as_of"]
            if form["min_relevance"]:
                body["min_relevance"] = _float(str(form["min_relevance"]), 0.0)
            if form["session_id"]:
                body["session_id"] = form["session_id"]
            try:
                out = await who.services.recall.recall(
                    who.tenant, RecallRequest.model_validate(body)
                )
            except ValidationError as exc:
                error = "; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
                )
        return render(
            request,
            who,
            "recall.html",
            user_id=user_id,
            tab="recall",
            form=form,
            out=out,
            error=error,
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/forgetting")
async def forgetting(
    request: Request, user_id: str, cursor: str | None = None, dry: str | None = None
) -> Response:
    """Each memory of the page on its retention curve against the sweep's threshold, with
    the verdict the sweep would give it now; `dry=1` runs the sweep's own dry run over the
    user's first `DRY_SAMPLE` memories in the sweep's order (never all of a large user)."""

    async def build(who: Who) -> Response:
        f = who.services.forgetting
        policy = await f.policy(who.tenant)
        now = f.clock()
        page = await who.services.memories.list(who.tenant, user_id, None, cursor, PAGE)
        share = who.settings.importance_intrinsic_share
        rows = []
        for m in page.items:
            d = forgetting_rules.decide(
                forgetting_rules.Snapshot(
                    strength=m.strength,
                    access_count=m.access_count,
                    importance=forgetting_rules.importance(m.importance, m.access_count, share),
                    pinned=m.pinned,
                    created_at=m.created_at,
                    last_accessed_at=m.last_accessed_at,
                    stored_at=m.updated_at,
                ),
                now,
                policy,
            )
            verdict = "pinned" if m.pinned else d.verdict
            rows.append((m, d, verdict))
        chart = retention_chart(
            [(m.content[:60], d.days_since_use, d.stability_days, v) for m, d, v in rows],
            policy.retention_threshold,
            policy.base_days,
        )
        report, more = (
            await f.dry_run_sample(who.tenant, user_id, now, DRY_SAMPLE) if dry else (None, False)
        )
        return render(
            request,
            who,
            "forgetting.html",
            user_id=user_id,
            tab="forgetting",
            policy=policy,
            page=page,
            rows=rows,
            chart=chart,
            report=report,
            more=more,
            sample=DRY_SAMPLE,
            now=now,
        )

    return await _page(request, build, user_id=user_id)


@router.get("/users/{user_id}/context")
async def context(request: Request, user_id: str) -> Response:
    p = request.query_params

    async def build(who: Who) -> Response:
        sessions = await who.directory.sessions(who.tenant, user_id, None, PAGE)
        form = {
            "session_id": p.get("session_id", ""),
            "budget": int(_float(p.get("budget"), 2000)),
            "q": p.get("q", ""),
        }
        out, error = None, None
        if form["session_id"]:
            try:
                body = ContextRequest.model_validate(
                    {"user_id": user_id, "token_budget": form["budget"]}
                    | ({"query": form["q"]} if form["q"] else {})
                )
                out = await who.services.context.build(
                    who.tenant, _id("session_id", str(form["session_id"])), body
                )
            except ValidationError as exc:
                error = "; ".join(e["msg"] for e in exc.errors())
        return render(
            request,
            who,
            "context.html",
            user_id=user_id,
            tab="context",
            sessions=sessions,
            form=form,
            out=out,
            error=error,
        )

    return await _page(request, build, user_id=user_id)


# Changes: a confirm page, then a POST with the CSRF token.


@router.get("/users/{user_id}/confirm")
async def confirm(
    request: Request, user_id: str, action: str, memory_id: str | None = None
) -> Response:
    async def build(who: Who) -> Response:
        if action not in ACTIONS:
            raise InvalidInput("action", f"one of {', '.join(ACTIONS)}")
        memory = None
        if action not in ("erase", "restore"):
            memory = await who.services.memories.get(
                who.tenant, user_id, _uuid("memory_id", memory_id or "")
            )
        return render(
            request,
            who,
            "confirm.html",
            user_id=user_id,
            tab="",
            action=action,
            question=ACTIONS[action],
            memory=memory,
            memory_id=memory_id or "",
        )

    return await _page(request, build, scope="write", user_id=user_id)


@router.post("/users/{user_id}/act")
async def act(request: Request, user_id: str) -> Response:
    form = await _form(request)

    async def build(who: Who) -> Response:
        if not auth.csrf_ok(who.cookie or None, form.get("csrf")):
            raise InvalidInput("csrf", "the form is stale or not this console's: reload it")
        action, t = form.get("action", ""), who.tenant
        s = who.services
        back = f"{auth.PATH}/users/{user_id}/memories"
        if action == "erase":
            receipt = await s.erasure.request(t, user_id, wait=True)
            return RedirectResponse(
                f"{auth.PATH}/?{urlencode({'q': user_id})}&erased={receipt.state}",
                status_code=303,
            )
        if action not in ACTIONS:
            raise InvalidInput("action", f"one of {', '.join(ACTIONS)}")
        mid = _uuid("memory_id", form.get("memory_id", ""))
        if action == "forget":
            await s.memories.delete(t, user_id, mid)
        elif action == "restore":
            await s.forgetting.restore(t, user_id, mid)
        elif action in ("pin", "unpin"):
            patch = MemoryPatch(user_id=user_id, pinned=action == "pin", reason="console")
            await s.memories.update(t, mid, patch)
        else:
            await s.recall.feedback(
                t, FeedbackRequest.model_validate({"user_id": user_id, action: [str(mid)]})
            )
        return RedirectResponse(f"{back}?{urlencode({'done': f'{action} {mid}'})}", status_code=303)

    return await _page(request, build, scope="write", user_id=user_id)
