"""Every /v1 route passes the gate, and the gate's rules (app.core.auth) hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import RouteContext, iter_route_contexts
from hypothesis import given
from hypothesis import strategies as st

from app.api.deps import READS, UNGATED_ROUTES, TenantDep, authorize
from app.core.auth import (
    SCOPE_MARKER,
    foreign_users,
    hash_secret,
    is_loopback,
    new_key,
    parse_scopes,
    parse_token,
    required_scope,
    retry_after_seconds,
    same_secret,
    secret_matches,
    take_token,
)
from app.main import create_app
from app.settings import Settings


def _calls(dependant: Dependant) -> Iterator[object]:
    for dep in dependant.dependencies:
        yield dep.call
        yield from _calls(dep)


def v1_routes(app: FastAPI) -> Iterator[RouteContext]:
    """Every /v1 route, as served: included routers flattened, their prefixes applied."""
    for route in iter_route_contexts(app.routes):
        if route.path is not None and route.path.startswith("/v1") and route.methods:
            yield route


def ungated(app: FastAPI) -> list[str]:
    """The /v1 routes that neither depend on the gate nor are listed as intentional."""
    missing = []
    for route in v1_routes(app):
        gated = authorize in set(_calls(route.dependant))
        for method in sorted(route.methods or ()):
            name = f"{method} {route.path}"
            if not gated and name not in UNGATED_ROUTES:
                missing.append(name)
    return missing


def test_every_v1_route_passes_the_gate() -> None:
    app = create_app(Settings(_env_file=None))
    assert len(list(v1_routes(app))) > 20  # the walk sees the real routes
    assert ungated(app) == []


def test_the_walk_finds_a_route_without_the_gate() -> None:
    app = FastAPI()

    @app.get("/v1/users/{user_id}/export")
    async def leaky(user_id: str) -> dict[str, str]:
        return {}

    @app.get("/v1/users/{user_id}/fine")
    async def fine(user_id: str, tenant: TenantDep) -> dict[str, str]:
        return {}

    assert ungated(app) == ["GET /v1/users/{user_id}/export"]


def test_post_routes_that_only_read_declare_it() -> None:
    app = create_app(Settings(_env_file=None))
    reads = {r.path for r in v1_routes(app) if (r.openapi_extra or {}).get(SCOPE_MARKER) == "read"}
    assert reads == {"/v1/recall", "/v1/rewrite", "/v1/sessions/{session_id}/context"}
    assert READS == {SCOPE_MARKER: "read"}


@pytest.mark.parametrize(
    ("method", "path", "declared", "needed"),
    [
        ("GET", "/v1/memories", None, "read"),
        ("HEAD", "/v1/memories", None, "read"),
        ("POST", "/v1/memories", None, "write"),
        ("PATCH", "/v1/memories/{memory_id}", None, "write"),
        ("DELETE", "/v1/users/{user_id}", None, "write"),
        ("POST", "/v1/recall", "read", "read"),
        ("GET", "/v1/admin/keys", None, "admin"),
        ("POST", "/v1/admin/keys", "read", "admin"),  # no route reads its way out of admin
        ("POST", "/v1/administrators", None, "write"),
    ],
)
def test_required_scope(method: str, path: str, declared: str | None, needed: str) -> None:
    assert required_scope(method, path, declared) == needed


def test_a_key_round_trips_and_only_its_secret_matches() -> None:
    made = new_key()
    assert made.token.startswith(f"sk_strata_{made.key_id.hex}_")
    parsed = parse_token(made.token)
    assert parsed == (made.key_id, made.secret)
    assert made.secret_hash == hash_secret(made.secret) != made.secret
    assert secret_matches(made.secret, made.secret_hash)
    assert not secret_matches(made.secret + "x", made.secret_hash)
    assert not secret_matches(new_key().secret, made.secret_hash)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "sk_strata_",
        f"sk_strata_{uuid.uuid4().hex}",
        f"sk_strata_{uuid.uuid4().hex}_short",
        f"sk_strata_{uuid.uuid4().hex.upper()}_{'a' * 43}",
        f"pk_strata_{uuid.uuid4().hex}_{'a' * 43}",
        f"sk_strata_{uuid.uuid4().hex}_{'a' * 43} ",
    ],
    # Stable ids: parallel workers (xdist) must collect the same test names.
    ids=["empty", "no-id", "no-secret", "short-secret", "upper-id", "wrong-prefix", "space"],
)
def test_malformed_tokens_are_refused(token: str) -> None:
    assert parse_token(token) is None


def test_configured_keys_compare_by_value() -> None:
    assert same_secret("s3cret", "s3cret")
    assert not same_secret("s3cre", "s3cret")
    assert not same_secret("", "s3cret")


def test_scopes() -> None:
    assert parse_scopes("write") == {"read", "write"}
    assert parse_scopes(" read , admin ") == {"read", "admin"}
    with pytest.raises(ValueError, match="unknown"):
        parse_scopes("read,root")
    with pytest.raises(ValueError, match="at least one"):
        parse_scopes(",")


def test_foreign_users_is_anything_but_the_bound_id() -> None:
    assert foreign_users("ana", ["ana", "ana"]) == []
    assert foreign_users("ana", ["ana", "bob"]) == ["bob"]
    assert foreign_users("ana", [None]) == ["None"]
    assert foreign_users("ana", [["ana"]]) == ["['ana']"]
    assert foreign_users("ana", ["Ana"]) == ["Ana"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        (None, False),
        ("example", False),
    ],
)
def test_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@given(
    rate=st.floats(0.1, 1000),
    burst=st.integers(1, 1000),
    gaps=st.lists(st.floats(0, 5), min_size=1, max_size=60),
)
def test_a_bucket_never_grants_more_than_burst_plus_rate_times_time(
    rate: float, burst: int, gaps: list[float]
) -> None:
    tokens, updated, now, granted = float(burst), 0.0, 0.0, 0
    for gap in gaps:
        now += gap
        allowed, tokens, wait = take_token(tokens, updated, now, rate, burst)
        updated = now
        granted += allowed
        assert 0 <= tokens <= burst
        if not allowed:
            assert wait > 0
            # After waiting as told, the request goes.
            assert take_token(tokens, updated, now + wait + 1e-9, rate, burst)[0]
    assert granted <= burst + rate * now + 1e-6


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert retry_after_seconds(0.001) == 1
    assert retry_after_seconds(1.0) == 1
    assert retry_after_seconds(1.2) == 2


def test_the_document_names_each_operations_scope_and_bearer() -> None:
    spec = create_app(Settings(_env_file=None)).openapi()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in spec["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in operations.items():
            assert op["x-strata-scope"] == required_scope(method, path, op["x-strata-scope"])
            assert op["security"] == [{"HTTPBearer": []}], (method, path)
            assert {"401", "403", "429"} <= set(op["responses"]), (method, path)
