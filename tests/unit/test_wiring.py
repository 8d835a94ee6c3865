"""One composition root (app/wiring.py): no service is built anywhere else, no service is
handed the whole Settings (only the slice it reads), and each route alias of
app/api/deps.py hands out the `Services` field of its own type."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import app.services
from app.api import deps
from app.wiring import Services

APP = Path(__file__).resolve().parents[2] / "app"
# `KeyService(...)`, not `class KeyService(...)`.
CONSTRUCTED = re.compile(r"(?<!class )\b[A-Z]\w*Service\(")
SETTINGS = re.compile(r"\bSettings\b")


def test_no_service_is_constructed_outside_wiring() -> None:
    found = [
        f"{path.relative_to(APP.parent)}:{n}: {line.strip()}"
        for path in sorted(APP.rglob("*.py"))
        if path != APP / "wiring.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if CONSTRUCTED.search(line)
    ]
    assert found == []


def test_no_service_takes_the_settings() -> None:
    """No class or function of app/services is handed `Settings` (a parameter, or a field
    of a config): each takes a frozen slice of the fields it reads, built in app/wiring.py,
    so its signature says which settings it depends on."""
    takes = []
    for info in pkgutil.iter_modules(app.services.__path__, "app.services."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            annotated: list[Callable[..., object]]
            if inspect.isclass(obj):
                annotated = [obj, *(f for f in vars(obj).values() if inspect.isfunction(f))]
            elif inspect.isfunction(obj):
                annotated = [obj]
            else:
                continue
            for f in annotated:
                # The annotations as written (`from __future__ import annotations`).
                if any(SETTINGS.search(str(a)) for a in inspect.get_annotations(f).values()):
                    takes.append(f"{module.__name__}.{f.__qualname__}")
    assert takes == []


def test_each_service_alias_hands_out_its_own_services_field() -> None:
    fields = typing.get_type_hints(Services)
    aliases = {
        name: typing.get_args(value)
        for name, value in vars(deps).items()
        if name.endswith("Dep") and name not in ("PrincipalDep", "TenantDep")
    }
    assert len(aliases) == len(fields) - 1  # every service but metrics (its route reads it)
    for name, (kind, depends) in aliases.items():
        field = depends.dependency.__name__.removeprefix("service_")
        assert fields[field] is kind, name


def test_a_service_that_does_not_exist_fails_at_import() -> None:
    with pytest.raises(ValueError, match="no service 'nope'"):
        deps.service("nope")
