"""One composition root (app/wiring.py): no service is built anywhere else, and each route
alias of app/api/deps.py hands out the `Services` field of its own type."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from app.api import deps
from app.wiring import Services

APP = Path(__file__).resolve().parents[2] / "app"
# `KeyService(...)`, not `class KeyService(...)`.
CONSTRUCTED = re.compile(r"(?<!class )\b[A-Z]\w*Service\(")


def test_no_service_is_constructed_outside_wiring() -> None:
    found = [
        f"{path.relative_to(APP.parent)}:{n}: {line.strip()}"
        for path in sorted(APP.rglob("*.py"))
        if path != APP / "wiring.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if CONSTRUCTED.search(line)
    ]
    assert found == []


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
