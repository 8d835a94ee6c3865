"""The compose file stays valid (no Docker engine runs here to try it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_compose_runs_the_full_stack_with_healthchecks() -> None:
    services = _compose()["services"]
    assert set(services) == {"api", "worker", "postgres", "redis", "qdrant"}
    for name, service in services.items():
        assert service["healthcheck"]["test"], name
    assert services["worker"]["command"] == ["python", "-m", "app.worker"]
    for dependency in ("postgres", "redis", "qdrant"):
        assert services["api"]["depends_on"][dependency]["condition"] == "service_healthy"


def test_compose_environment_is_understood_by_settings() -> None:
    env = {k: str(v) for k, v in _compose()["services"]["worker"]["environment"].items()}
    known = {f"STRATA_{name.upper()}" for name in Settings.model_fields}
    assert set(env) <= known, set(env) - known
    values: dict[str, Any] = {k.removeprefix("STRATA_").lower(): v for k, v in env.items()}
    settings = Settings.model_validate(values)
    assert not settings.is_sqlite
    assert settings.run_worker_in_process is False
    assert settings.qdrant_url == "http://qdrant:6333"


def test_embedded_is_the_default() -> None:
    settings = Settings(_env_file=None)
    assert settings.is_sqlite
    assert settings.run_worker_in_process
    assert settings.qdrant_url is None
