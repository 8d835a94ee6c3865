"""The gate's cost per request (docs/security.md): the same trivial route with and without
`TenantDep`, in-process over ASGI, for each kind of caller.

    python bench/auth_overhead.py [--requests 5000] [--redis redis://127.0.0.1:6379/1]

Keys live in a SQLite file in a temporary directory (the embedded store); with `--redis` the
rate-limited case also runs against the Redis Lua bucket. Reported per case: p50 and p99 of
the request, and the p50 above the ungated route's, in microseconds. The app has no other
dependency than the key service, so the difference is the gate's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api.deps import TenantDep
from app.schemas.keys import KeyCreate
from app.services.keys import KeyService
from app.settings import Settings
from app.stores.db import Database, create_engine, migrate
from app.stores.ratelimit import LocalRateLimiter, RateLimiter, RedisRateLimiter
from app.wiring import key_config


def _app(keys: KeyService) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        yield {"services": SimpleNamespace(keys=keys)}

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/plain")
    async def plain(body: dict[str, Any]) -> dict[str, str]:
        return {"tenant": "-"}

    @app.post("/v1/gated")
    async def gated(body: dict[str, Any], tenant: TenantDep) -> dict[str, str]:
        return {"tenant": tenant}

    return app


async def _time(app: FastAPI, path: str, headers: dict[str, str], n: int) -> list[float]:
    from asgi_lifespan import LifespanManager

    body = {"user_id": "ana", "query": "x" * 200}
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            for _ in range(50):  # warm: caches, the key look-up
                await client.post(path, json=body, headers=headers)
            took = []
            for _ in range(n):
                start = time.perf_counter()
                resp = await client.post(path, json=body, headers=headers)
                took.append((time.perf_counter() - start) * 1e6)
                assert resp.status_code == 200, resp.text
    return sorted(took)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--redis", default=None, help="a Redis URL for the Lua bucket case")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            _env_file=None, data_dir=Path(tmp), api_key="legacy-key", admin_key="admin-key"
        )
        await migrate(settings.database_dsn)
        db = Database(create_engine(settings.database_dsn))
        redis = Redis.from_url(args.redis) if args.redis else None

        async def service(limiter: RateLimiter, mode: str = "keys") -> KeyService:
            keys = KeyService(db, key_config(settings), limiter)
            keys.mode = mode  # type: ignore[assignment]
            return keys

        setup = await service(LocalRateLimiter())
        key = (await setup.create("acme", KeyCreate(scopes=["read", "write"]))).key
        bound = (await setup.create("acme", KeyCreate(user_id="ana"))).key
        limited = (
            await setup.create("acme", KeyCreate(rate_limit_per_second=1e6, rate_limit_burst=10**6))
        ).key

        cases: list[tuple[str, str, KeyService, dict[str, str]]] = [
            ("no gate", "/v1/plain", await service(LocalRateLimiter()), {}),
            ("open (loopback)", "/v1/gated", await service(LocalRateLimiter(), "loopback"), {}),
            ("legacy key", "/v1/gated", await service(LocalRateLimiter()), _b("legacy-key")),
            ("key", "/v1/gated", await service(LocalRateLimiter()), _b(key)),
            ("key bound to a user", "/v1/gated", await service(LocalRateLimiter()), _b(bound)),
            ("key + bucket (process)", "/v1/gated", await service(LocalRateLimiter()), _b(limited)),
        ]
        if redis is not None:
            cases.append(
                (
                    "key + bucket (Redis)",
                    "/v1/gated",
                    await service(RedisRateLimiter(redis)),
                    _b(limited),
                )
            )
        print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
        print(f"# {args.requests} sequential POSTs each, 200-character JSON body, in-process ASGI")
        print(f"{'case':26} {'p50 µs':>8} {'p99 µs':>8} {'+p50 µs':>8}")
        base = None
        for name, path, keys, headers in cases:
            took = await _time(_app(keys), path, headers, args.requests)
            p50 = statistics.median(took)
            p99 = took[int(len(took) * 0.99) - 1]
            base = p50 if base is None else base
            print(f"{name:26} {p50:8.0f} {p99:8.0f} {p50 - base:8.0f}")
        if redis is not None:
            pings = []
            for _ in range(args.requests):
                start = time.perf_counter()
                await redis.ping()
                pings.append((time.perf_counter() - start) * 1e6)
            print(f"{'(Redis PING, for scale)':26} {statistics.median(pings):8.0f}")
            await redis.aclose()
        await db.close()


def _b(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


if __name__ == "__main__":
    asyncio.run(main())
