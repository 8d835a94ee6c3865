"""Who uses the console: the gate's rules (app/api/deps.py), with the key in a cookie.

The operator pastes a key once (the login page); it is kept in an HttpOnly, SameSite=Strict
cookie scoped to /console, and each request is identified from it exactly as the REST gate
identifies a Bearer key: the same `KeyService.authenticate` and rate limit, then the scope
(`read` for every page, `write` for each change) and the user binding (a key bound to one
user sees that user only). A server without keys (open, or loopback-only) needs no key; its
cookie then holds a random value that only anchors the CSRF token.

Every change is a POST form carrying a CSRF token derived from the cookie (an HMAC of it),
so another site cannot post one for the operator; SameSite=Strict already keeps the cookie
off cross-site requests.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request

from app.core.auth import Principal, format_scopes, is_loopback
from app.errors import InsufficientScope, LoopbackOnly, UserNotAllowed
from app.services.keys import KeyService

COOKIE = "strata_console"
PATH = "/console"


def new_anchor() -> str:
    """The cookie of a server without keys: it only anchors the CSRF token."""
    return "open:" + secrets.token_urlsafe(24)


def csrf_token(cookie: str) -> str:
    """Tied to the cookie: only a page served with the cookie can carry it."""
    return hmac.new(b"strata-console-csrf", cookie.encode(), hashlib.sha256).hexdigest()


def csrf_ok(cookie: str | None, token: str | None) -> bool:
    return bool(cookie and token) and hmac.compare_digest(csrf_token(cookie or ""), token or "")


async def identify(keys: KeyService, request: Request) -> Principal:
    """The caller, as the REST gate decides it: open or loopback servers need no key
    (loopback ones answer this machine only); otherwise the cookie's key, within its rate
    limit. Unauthorized without a valid key."""
    if keys.mode != "keys":
        host = request.client.host if request.client else "127.0.0.1"
        if keys.mode == "loopback" and not is_loopback(host):
            raise LoopbackOnly("this server answers callers on its own machine only")
        return keys.open_principal()
    token = request.cookies.get(COOKIE)
    if token is not None and token.startswith("open:"):
        token = None
    principal = await keys.authenticate(token)
    await keys.limit(principal)
    return principal


def require(principal: Principal, scope: str, user_id: str | None = None) -> None:
    """The scope, then the user binding, as the REST gate checks them."""
    if scope not in principal.scopes:
        raise InsufficientScope(scope, format_scopes(principal.scopes))
    if principal.user_id is not None and user_id is not None and user_id != principal.user_id:
        raise UserNotAllowed(f"this key is bound to user {principal.user_id!r}, not {user_id!r}")
