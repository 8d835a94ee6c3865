"""`strata`: the command line. Each command builds the services through the one container
(app/wiring.py) that the api and the worker use, or talks to a running service over HTTP
(app/cli_backends.py). Usage and examples: docs/cli.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

if TYPE_CHECKING:  # imported when a command runs: `strata --help` stays quick
    from app.importer import Checkpoint, Position, Source, Tally
from rich.table import Table
from rich.text import Text

from app.datalock import DataDirBusy, DataDirLock
from app.settings import Settings, refuse_unworkable

T = TypeVar("T")
# No markup nor highlighting: what they print holds file names and stored text.
out = Console(markup=False, highlight=False)  # results: tables, keys, summaries
err = Console(stderr=True, markup=False, highlight=False)  # progress, notes and errors

cli = typer.Typer(
    name="strata",
    help="Strata, long-term memory for AI agents.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",  # docstrings' paragraphs are reflowed to the terminal
)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
) -> None:
    """Run the HTTP service (embedded by default: no servers needed)."""
    import uvicorn

    uvicorn.run("app.main:create_app", factory=True, host=host, port=port)


@cli.command()
def mcp(
    tenant: Annotated[
        str | None, typer.Option(help="tenant served (default: the default tenant)")
    ] = None,
    user: Annotated[str | None, typer.Option(help="serve this user only")] = None,
) -> None:
    """Serve the MCP tools over stdio, for a local agent that starts `strata mcp` itself.

    It opens the data directory as the service would (STRATA_* settings), with the
    promotion worker in-process when the settings say so; nothing but MCP goes to stdout.
    """
    # stdout is the protocol's: logs go to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        asyncio.run(_serve_mcp(Settings(), tenant, user))
    except DataDirBusy as busy:
        _fail(str(busy), "data_dir_in_use")


async def _serve_mcp(settings: Settings, tenant: str | None, user: str | None) -> None:
    from dataclasses import replace

    from app import mcp as strata_mcp
    from app.wiring import open_container
    from app.worker import start_in_process

    refuse_unworkable(settings, "api")
    async with DataDirLock(settings, "strata mcp"), open_container(settings) as container:
        principal = container.services.keys.open_principal()
        principal = replace(principal, tenant_id=tenant or principal.tenant_id, user_id=user)
        strata_mcp.bind(container.services, principal)
        worker = start_in_process(container) if settings.run_worker_in_process else None
        try:
            await strata_mcp.build_server().run_stdio_async()
        finally:
            if worker is not None:
                with contextlib.suppress(Exception):
                    await worker.stop()
            await container.services.recall.drain()


# The data commands: over HTTP with --url and --key, or on the data directory.

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="STRATA_URL",
        help="a running service, e.g. http://127.0.0.1:8000. Without it the command opens "
        "the data directory of the STRATA_* settings itself (the service must not be running)",
        show_default=False,
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option("--key", envvar="STRATA_KEY", help="the API key for --url", show_default=False),
]
TenantOption = Annotated[
    str | None,
    typer.Option(
        help="without --url: the tenant to act as (default: the default tenant); over HTTP "
        "the key decides",
        show_default=False,
    ),
]
UserOption = Annotated[str, typer.Option("--user", "-u", help="the user id")]


def _run(
    command: str,
    work: Callable[[Any], Awaitable[T]],
    url: str | None,
    key: str | None,
    tenant: str | None = None,
) -> T:
    """Open the backend, run `work` on it, and turn a failure into a message and exit 1."""
    from app.cli_backends import CliError, open_backend

    async def go() -> T:
        async with open_backend(url, key, command=command, tenant=tenant) as backend:
            return await work(backend)

    try:
        return asyncio.run(go())
    except CliError as exc:
        _fail(exc.detail, exc.code, exc.errors)


def _fail(
    detail: str, code: str | None = None, errors: list[dict[str, Any]] | None = None
) -> NoReturn:
    err.print(
        Text.assemble(("error:", "bold red"), " ", detail, (f" ({code})" if code else "", "dim")),
        soft_wrap=True,
    )
    for e in errors or []:
        field = e.get("field") or ".".join(str(p) for p in e.get("loc", []))
        err.print(
            f"  {field}: {e.get('message') or e.get('msg')}",
            soft_wrap=True,
        )
    raise typer.Exit(1)


@cli.command("import")
def import_(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, readable=True, metavar="FILE", help="the file to import"
        ),
    ],
    user: UserOption,
    session: Annotated[
        str | None,
        typer.Option(
            help="the session of the messages that name none (default: `imported`; Mem0: `mem0`)",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="auto, jsonl (one message a line), strata (Strata's export) or mem0 "
            "(Mem0's get_all/export JSON)",
        ),
    ] = "auto",
    batch: Annotated[int, typer.Option(min=1, max=1000, help="messages per call")] = 500,
    url: UrlOption = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
    pause_after: Annotated[int | None, typer.Option(hidden=True)] = None,
) -> None:
    """Import a history as USER's messages, keeping their times and ids.

    Resumable: after each batch the service confirmed, a checkpoint next to FILE
    (FILE.strata-import.json) records how far it got; after Ctrl-C or a crash, the same
    command continues from there. Every message has a client id (its own, or one derived
    from its place in the file), so whatever is sent twice is counted as a duplicate,
    never stored twice.
    """
    from app.importer import Checkpoint, ImportFileError, Tally, open_source

    if fmt not in ("auto", "jsonl", "strata", "mem0"):
        _fail(f"unknown --format {fmt!r}: auto, jsonl, strata or mem0")
    try:
        source = open_source(file, fmt, session)  # type: ignore[arg-type]
    except ImportFileError as exc:
        _fail(str(exc), "invalid_file")
    tally = Tally()
    holder: dict[str, Any] = {}
    started = time.monotonic()

    async def work(backend: Any) -> None:
        holder["sending"] = time.monotonic()  # the rate leaves out opening the store
        identity = {
            "file": str(file.resolve()),
            "format": source.format,
            "user": user,
            "session": session or "",
            "target": backend.where,
        }
        checkpoint = holder["checkpoint"] = Checkpoint.beside(file, identity)
        start = checkpoint.load(source)
        _announce_import(file, source, start, backend.where)
        for head in source.sessions():
            await backend.upsert_session(user, head.session_id, head.system_prompt, head.metadata)
        await _send_batches(
            backend, source, checkpoint, tally, start, user, batch, pause_after, holder["sending"]
        )

    try:
        _run("import", work, url, key, tenant)
    except ImportFileError as exc:
        _fail(
            f"{exc} (the messages before it are imported; fix the file and run the "
            "command again to continue)",
            "invalid_file",
        )
    except KeyboardInterrupt:
        _interrupted(tally, source, holder.get("checkpoint"))
    _report_import(tally, started, holder.get("sending", started), remote=bool(url))


def _interrupted(tally: Tally, source: Source, checkpoint: Checkpoint | None) -> NoReturn:
    err.print(
        f"Interrupted: {tally.confirmed.records:,} of {source.total:,} messages confirmed"
        + (f"; the checkpoint is {checkpoint.path}" if checkpoint else "")
        + ". Run the same command again to resume.",
        soft_wrap=True,
    )
    raise typer.Exit(130) from None


def _announce_import(file: Path, source: Source, start: Position, target: str) -> None:
    where = f"{file.name} ({source.format}, {source.total:,} messages) -> {target}"
    if start.records:
        err.print(
            f"Resuming {where} after {start.records:,} confirmed messages"
            + (f" (line {start.line:,})" if start.line else ""),
            soft_wrap=True,
        )
    else:
        err.print(f"Importing {where}", soft_wrap=True)


async def _send_batches(
    backend: Any,
    source: Source,
    checkpoint: Checkpoint,
    tally: Tally,
    start: Position,
    user: str,
    batch: int,
    pause_after: int | None,
    sending: float,
) -> None:
    """The file's messages in batches, under a progress bar that shows the sending rate."""
    from app.importer import run_import

    batches = 0
    with _import_progress() as progress:
        task = progress.add_task("import", total=source.total, completed=start.records, rate="")

        def moved(t: Tally) -> None:
            nonlocal batches
            seconds = max(time.monotonic() - sending, 1e-6)
            progress.update(
                task, completed=t.confirmed.records, rate=f"{t.sent / seconds:,.0f} msg/s"
            )
            batches += 1

        async def send(session_id: str, messages: list[Any]) -> tuple[int, int]:
            if pause_after is not None and batches >= pause_after:
                err.print("paused", soft_wrap=True)  # a test interrupts it here
                await asyncio.Event().wait()
            sent: tuple[int, int] = await backend.add_messages(user, session_id, messages)
            return sent

        await run_import(
            source, checkpoint, tally, send, start=start, max_messages=batch, after_batch=moved
        )


def _report_import(tally: Tally, started: float, sending_since: float, *, remote: bool) -> None:
    now = time.monotonic()
    sending = now - sending_since
    out.print(
        f"Imported {tally.sent:,} messages ({tally.accepted:,} accepted, "
        f"{tally.duplicates:,} duplicates) in {now - started:.1f} s: "
        f"{tally.sent / max(sending, 1e-6):,.0f} messages/s over {sending:.1f} s of sending",
        soft_wrap=True,
    )
    if not remote:
        err.print(
            "They are indexed for recall by the service's worker when it runs (strata serve).",
            soft_wrap=True,
        )


def _import_progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
    )


@cli.command()
def export(
    user: UserOption,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="the file to write (default: USER.json)",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    url: UrlOption = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
) -> None:
    """Write everything held about USER to one JSON document.

    Sessions with their messages, memories, summaries and the graph: the document
    `strata import --format strata` reads. It is written to FILE.part, then renamed.
    """
    target = output or Path(f"{user}.json")
    partial = target.with_name(target.name + ".part")
    started = time.monotonic()

    async def work(backend: Any) -> None:
        with (
            partial.open("wb") as f,
            Progress(
                SpinnerColumn(),
                TextColumn("export"),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                console=err,
            ) as progress,
        ):
            task = progress.add_task("export", total=None)
            async for chunk in backend.export(user):
                f.write(chunk)
                progress.advance(task, len(chunk))

    try:
        _run("export", work, url, key, tenant)
    except BaseException:
        partial.unlink(missing_ok=True)  # never a truncated file under the real name
        raise
    partial.replace(target)
    doc = orjson.loads(target.read_bytes())
    sessions = doc.get("sessions") or []
    messages = sum(len(s.get("messages") or []) for s in sessions)
    out.print(
        f"Exported {user}: {len(sessions):,} sessions, {messages:,} messages, "
        f"{len(doc.get('memories') or []):,} memories to {target} "
        f"({target.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - started:.1f} s",
        soft_wrap=True,
    )


@cli.command()
def recall(
    query: Annotated[str, typer.Argument(help="what to look for, in plain words")],
    user: UserOption,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, max=200, help="results")] = 10,
    reinforce: Annotated[
        bool, typer.Option(help="count this look-up as a use of what it finds")
    ] = False,
    url: UrlOption = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
) -> None:
    """Show what recall finds for QUERY among USER's memories, best first."""

    async def work(backend: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await backend.recall(user, query, top_k, reinforce)
        return found

    results = _run("recall", work, url, key, tenant)
    if not results:
        err.print("No memories found.")
        return
    table = Table(show_lines=False)
    table.add_column("score", justify="right")
    table.add_column("created_at")
    table.add_column("kind")
    table.add_column("content", overflow="fold")
    for r in results:
        table.add_row(
            f"{r['score']:.3f}",
            r["created_at"][:16].replace("T", " "),
            r["kind"] if r["kind"] == "summary" else r["memory_type"],
            Text(r["content"]),
        )
    out.print(table)


keys = typer.Typer(
    help="Create, list and revoke API keys (over HTTP: with the admin key).", no_args_is_help=True
)
cli.add_typer(keys, name="keys")


@keys.command("create")
def keys_create(
    tenant: Annotated[
        str | None,
        typer.Option(
            help="the key's tenant (default: the default tenant, or the admin key's own)",
            show_default=False,
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", help="bind the key to this user", show_default=False),
    ] = None,
    scopes: Annotated[str, typer.Option(help="read, write, admin: a comma list")] = "read,write",
    name: Annotated[str, typer.Option(help="a label for people")] = "",
    rate: Annotated[
        float | None, typer.Option(help="requests per second", show_default=False)
    ] = None,
    burst: Annotated[
        int | None, typer.Option(help="the rate's bucket size", show_default=False)
    ] = None,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Create a key and print it, once: only a hash of it is stored."""
    body: dict[str, Any] = {
        "tenant": tenant,
        "user_id": user,
        "name": name,
        "scopes": [s.strip() for s in scopes.split(",") if s.strip()],
        "rate_limit_per_second": rate,
        "rate_limit_burst": burst,
    }
    made = _run(
        "keys", lambda b: b.create_key({k: v for k, v in body.items() if v is not None}), url, key
    )
    err.print(
        f"Key {made['id']} of tenant {made['tenant']}, scopes {','.join(made['scopes'])}"
        + (f", user {made['user_id']}" if made.get("user_id") else "")
        + ". Keep it now: it cannot be shown again.",
        soft_wrap=True,
    )
    out.print(made["key"], soft_wrap=True)


@keys.command("list")
def keys_list(
    tenant: Annotated[
        str | None, typer.Option(help="one tenant's keys (default: all)", show_default=False)
    ] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="include revoked keys")] = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """List keys by id (never the keys themselves)."""
    items = _run("keys", lambda b: b.list_keys(tenant, revoked), url, key)
    table = Table()
    table.add_column("id", no_wrap=True)
    for column in ("tenant", "scopes", "user", "name", "created", "state"):
        table.add_column(column, overflow="fold")
    for k in items:
        table.add_row(
            k["id"],
            k["tenant"],
            ",".join(k["scopes"]),
            k.get("user_id") or "",
            Text(k.get("name") or ""),
            k["created_at"][:16].replace("T", " "),
            "revoked" if k.get("revoked_at") else "active",
        )
    out.print(table)


@keys.command("revoke")
def keys_revoke(
    key_id: Annotated[uuid.UUID, typer.Argument(help="the key's id (from `strata keys list`)")],
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Revoke a key. Other processes stop accepting it within key_cache_seconds."""
    revoked = _run("keys", lambda b: b.revoke_key(key_id), url, key)
    out.print(
        f"{revoked['id']} revoked at {revoked['revoked_at']}",
        soft_wrap=True,
    )


jobs = typer.Typer(help="Background jobs (erasure, summaries, maintenance).", no_args_is_help=True)
cli.add_typer(jobs, name="jobs")


@jobs.command("show")
def jobs_show(
    job_id: Annotated[uuid.UUID, typer.Argument(help="the job's id")],
    url: UrlOption = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
) -> None:
    """Show a job: its state, attempts, last error and result."""
    job = _run("jobs", lambda b: b.get_job(job_id), url, key, tenant)
    out.print_json(data=job)


@cli.command()
def reindex(
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", help="only this user's memories", show_default=False),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count, change nothing")] = False,
    url: UrlOption = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
) -> None:
    """Rebuild the memories' index points from the database.

    The maintenance task `reindex`: after a change of embedding model, or an index restored
    from an older backup. Over HTTP it runs as a job of the service's worker, and the
    command waits for its result.
    """
    started = time.monotonic()
    with err.status("reindexing"):
        result = _run("reindex", lambda b: b.reindex(user, dry_run), url, key, tenant)
    verb = "would rebuild" if dry_run else "rebuilt"
    out.print(
        f"{verb} {result.get('memories', 0):,} memories' points in "
        f"{time.monotonic() - started:.1f} s",
        soft_wrap=True,
    )


def main() -> None:
    cli()
