"""`strata`: the command line. Each command builds the services through the one container
(app/wiring.py) that the api and the worker use, or talks to a running service over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Annotated

import typer

from app.settings import Settings, refuse_unworkable

cli = typer.Typer(
    name="strata",
    help="Strata, long-term memory for AI agents.",
    no_args_is_help=True,
    add_completion=False,
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
    asyncio.run(_serve_mcp(Settings(), tenant, user))


async def _serve_mcp(settings: Settings, tenant: str | None, user: str | None) -> None:
    from dataclasses import replace

    from app import mcp as strata_mcp
    from app.wiring import open_container
    from app.worker import finish, run_worker

    refuse_unworkable(settings, "api")
    async with open_container(settings) as container:
        principal = container.services.keys.open_principal()
        principal = replace(principal, tenant_id=tenant or principal.tenant_id, user_id=user)
        strata_mcp.bind(container.services, principal)
        stop = asyncio.Event()
        worker = (
            asyncio.create_task(run_worker(container, stop), name="strata-worker")
            if settings.run_worker_in_process
            else None
        )
        try:
            await strata_mcp.build_server().run_stdio_async()
        finally:
            stop.set()
            if worker is not None:
                with contextlib.suppress(Exception):
                    await finish(worker, settings.worker_stop_grace_seconds)
            await container.services.recall.drain()


def main() -> None:
    cli()
