"""What a `strata` data command talks to: a running service over HTTP with a key
(`HttpBackend`), or the data directory opened in this process through the one container
(`EmbeddedBackend`, app/wiring.py), never both and never a second way to build services.

Both answer in the API's JSON shapes, and raise `CliError` with the problem's `detail` and
`code`, so each command is written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from app.datalock import DataDirBusy, DataDirLock
from app.errors import AppError, InvalidInput
from app.schemas.forgetting import MaintenanceRequest
from app.schemas.ingest import IngestRequest, MessageIn, SessionUpsert
from app.schemas.keys import KeyCreate
from app.schemas.recall import RecallRequest
from app.settings import Settings, refuse_unworkable
from app.wiring import Container, open_container

JOB_DONE = ("succeeded", "failed")
RETRIED = (429, 502, 503, 504)


class CliError(Exception):
    """A failure to report and exit on: the problem's detail, its code and field errors."""

    def __init__(
        self, detail: str, code: str | None = None, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.errors = errors or []


class Backend(Protocol):
    where: str  # the service's URL, or the data directory: what a checkpoint is tied to

    async def upsert_session(
        self, user: str, session: str, system_prompt: str | None, metadata: dict[str, Any]
    ) -> None: ...
    async def add_messages(
        self, user: str, session: str, messages: list[MessageIn]
    ) -> tuple[int, int]: ...
    def export(self, user: str) -> AsyncIterator[bytes]: ...
    async def recall(
        self, user: str, query: str, top_k: int, reinforce: bool
    ) -> list[dict[str, Any]]: ...
    async def create_key(self, body: dict[str, Any]) -> dict[str, Any]: ...
    async def list_keys(self, tenant: str | None, revoked: bool) -> list[dict[str, Any]]: ...
    async def revoke_key(self, key_id: uuid.UUID) -> dict[str, Any]: ...
    async def get_job(self, job_id: uuid.UUID) -> dict[str, Any]: ...
    async def reindex(self, user: str | None, dry_run: bool) -> dict[str, Any]: ...


def _validation(exc: ValidationError) -> CliError:
    errors = [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in exc.errors()]
    return CliError("invalid input", InvalidInput.code, errors)


@contextlib.contextmanager
def _app_errors() -> Any:
    try:
        yield
    except AppError as exc:
        raise CliError(exc.detail, exc.code, exc.errors) from None
    except ValidationError as exc:
        raise _validation(exc) from None


class EmbeddedBackend:
    """The data directory's own services, in this process (the service must not run)."""

    def __init__(self, container: Container, tenant: str) -> None:
        self.c = container
        self.s = container.services
        self.tenant = tenant
        self.where = str(container.resources.settings.data_dir.resolve())

    async def upsert_session(
        self, user: str, session: str, system_prompt: str | None, metadata: dict[str, Any]
    ) -> None:
        with _app_errors():
            body = SessionUpsert(user_id=user, system_prompt=system_prompt, metadata=metadata)
            await self.s.ingest.upsert_session(self.tenant, session, body)

    async def add_messages(
        self, user: str, session: str, messages: list[MessageIn]
    ) -> tuple[int, int]:
        with _app_errors():
            body = IngestRequest(user_id=user, messages=messages)
            done = await self.s.ingest.add_messages(self.tenant, session, body)
        return done.accepted, done.duplicates

    async def export(self, user: str) -> AsyncIterator[bytes]:
        with _app_errors():
            chunks = await self.s.export.open(self.tenant, user)
            async for chunk in chunks:
                yield chunk

    async def recall(
        self, user: str, query: str, top_k: int, reinforce: bool
    ) -> list[dict[str, Any]]:
        with _app_errors():
            body = RecallRequest(user_id=user, query=query, top_k=top_k, reinforce=reinforce)
            found = await self.s.recall.recall(self.tenant, body)
            await self.s.recall.drain()  # the reinforcement, if any, before the process ends
        return [r.model_dump(mode="json") for r in found.results]

    async def create_key(self, body: dict[str, Any]) -> dict[str, Any]:
        with _app_errors():
            request = KeyCreate.model_validate(body)
            made = await self.s.keys.create(request.tenant or self.tenant, request)
        return made.model_dump(mode="json")

    async def list_keys(self, tenant: str | None, revoked: bool) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        with _app_errors():
            while True:
                page = await self.s.keys.page(tenant, cursor, 200, revoked)
                items += [k.model_dump(mode="json") for k in page.items]
                if page.next_cursor is None:
                    return items
                cursor = page.next_cursor

    async def revoke_key(self, key_id: uuid.UUID) -> dict[str, Any]:
        with _app_errors():
            return (await self.s.keys.revoke(None, key_id)).model_dump(mode="json")

    async def get_job(self, job_id: uuid.UUID) -> dict[str, Any]:
        with _app_errors():
            return (await self.s.jobs.get(self.tenant, job_id)).model_dump(mode="json")

    async def reindex(self, user: str | None, dry_run: bool) -> dict[str, Any]:
        # No worker runs here to take a queued job: the maintenance task's own call, now.
        with _app_errors():
            MaintenanceRequest(task="reindex", user_id=user, dry_run=dry_run)
            result = await self.c.reindexer.rebuild(
                tenant_id=self.tenant, user_id=user, dry_run=dry_run
            )
        return {"task": "reindex", "dry_run": dry_run, **result}


class HttpBackend:
    """A running service, with a key; retries what a retry may fix (429, 503, a dropped
    connection), which the ingest API's client ids make safe."""

    def __init__(self, http: httpx.AsyncClient, *, attempts: int = 5) -> None:
        self.http = http
        self.attempts = attempts
        self.where = str(http.base_url).rstrip("/")

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt == self.attempts:
                    raise CliError(f"cannot reach {self.where}: {exc!r}") from None
                await asyncio.sleep(min(2**attempt, 30))
                continue
            if response.status_code in RETRIED and attempt < self.attempts:
                wait = response.headers.get("Retry-After", "")
                await asyncio.sleep(float(wait) if wait.isdigit() else min(2**attempt, 30))
                continue
            _raise_problem(response)
            return response.json()
        raise AssertionError("unreachable")

    async def upsert_session(
        self, user: str, session: str, system_prompt: str | None, metadata: dict[str, Any]
    ) -> None:
        body = {"user_id": user, "system_prompt": system_prompt, "metadata": metadata}
        await self._call("PUT", f"/v1/sessions/{session}", json=body)

    async def add_messages(
        self, user: str, session: str, messages: list[MessageIn]
    ) -> tuple[int, int]:
        body = {
            "user_id": user,
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages],
        }
        done = await self._call("POST", f"/v1/sessions/{session}/messages", json=body)
        return int(done["accepted"]), int(done["duplicates"])

    async def export(self, user: str) -> AsyncIterator[bytes]:
        try:
            async with self.http.stream("GET", f"/v1/users/{user}/export") as response:
                if response.is_error:
                    await response.aread()
                    _raise_problem(response)
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach {self.where}: {exc!r}") from None

    async def recall(
        self, user: str, query: str, top_k: int, reinforce: bool
    ) -> list[dict[str, Any]]:
        body = {"user_id": user, "query": query, "top_k": top_k, "reinforce": reinforce}
        found = await self._call("POST", "/v1/recall", json=body)
        results: list[dict[str, Any]] = found["results"]
        return results

    async def create_key(self, body: dict[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = await self._call("POST", "/v1/admin/keys", json=body)
        return made

    async def list_keys(self, tenant: str | None, revoked: bool) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 200, "include_revoked": revoked}
        if tenant is not None:
            params["tenant"] = tenant
        while True:
            page = await self._call("GET", "/v1/admin/keys", params=params)
            items += page["items"]
            if page["next_cursor"] is None:
                return items
            params["cursor"] = page["next_cursor"]

    async def revoke_key(self, key_id: uuid.UUID) -> dict[str, Any]:
        revoked: dict[str, Any] = await self._call("DELETE", f"/v1/admin/keys/{key_id}")
        return revoked

    async def get_job(self, job_id: uuid.UUID) -> dict[str, Any]:
        job: dict[str, Any] = await self._call("GET", f"/v1/jobs/{job_id}")
        return job

    async def reindex(self, user: str | None, dry_run: bool) -> dict[str, Any]:
        body = {"task": "reindex", "user_id": user, "dry_run": dry_run}
        job: dict[str, Any] = await self._call("POST", "/v1/admin/maintenance", json=body)
        while job["state"] not in JOB_DONE:  # the service's worker runs it
            await asyncio.sleep(0.5)
            job = await self.get_job(uuid.UUID(job["id"]))
        if job["state"] == "failed":
            raise CliError(f"the reindex job {job['id']} failed: {job['last_error']}", "job_failed")
        result: dict[str, Any] = job["result"] or {}
        return result


def _raise_problem(response: httpx.Response) -> None:
    if not response.is_error:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict) and "detail" in problem:
        raise CliError(str(problem["detail"]), problem.get("code"), problem.get("errors"))
    raise CliError(f"HTTP {response.status_code}: {response.text[:300]}")


@contextlib.asynccontextmanager
async def open_backend(
    url: str | None, key: str | None, *, command: str, tenant: str | None = None
) -> AsyncIterator[Backend]:
    """Over HTTP when `url` is given; otherwise the data directory of the `STRATA_*`
    settings, which no running service may hold (app/datalock.py)."""
    if url:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as http:
            yield HttpBackend(http)
        return
    settings = Settings()
    refuse_unworkable(settings, "api")
    lock = DataDirLock(settings, f"strata {command}")
    try:
        lock.__enter__()
    except DataDirBusy as busy:
        raise CliError(
            f"{busy}: stop it first, or send the command to it with --url and --key "
            "(STRATA_URL, STRATA_KEY)",
            "data_dir_in_use",
        ) from None
    try:
        async with open_container(settings) as container:
            principal = container.services.keys.open_principal()
            yield EmbeddedBackend(container, tenant or principal.tenant_id)
    finally:
        lock.__exit__(None, None, None)
