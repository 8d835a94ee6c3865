"""Every route and dependency of the api is a coroutine: FastAPI runs a plain `def` one in
its thread pool, a thread hop (and a wait for the GIL) per request for nothing."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from app.main import create_app
from app.settings import Settings


def _calls(dependant: Dependant) -> Iterator[tuple[str, Callable[..., Any]]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield getattr(sub.call, "__qualname__", type(sub.call).__name__), sub.call
        yield from _calls(sub)


def _is_async(call: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 (an instance with an async __call__)
    )


def test_no_route_or_dependency_runs_in_the_thread_pool(tmp_path: Any) -> None:
    app = create_app(Settings(_env_file=None, data_dir=tmp_path))
    # Included routers flattened, as served (FastAPI nests them).
    routes = [c.route for c in iter_route_contexts(app.routes) if isinstance(c.route, APIRoute)]
    assert len(routes) > 30  # the walk sees the real routes
    sync = [
        f"{route.path}: {name}"
        for route in routes
        for name, call in [("endpoint", route.endpoint), *_calls(route.dependant)]
        if not _is_async(call)
    ]
    assert sync == []
