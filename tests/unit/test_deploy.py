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
    assert set(services) == {"migrate", "api", "worker", "postgres", "redis", "qdrant"}
    for name, service in services.items():
        if name != "migrate":  # a one-shot: the others wait for it to exit 0
            assert service["healthcheck"]["test"], name
    assert services["worker"]["command"] == ["python", "-m", "app.worker"]
    for name in ("api", "worker"):
        depends = services[name]["depends_on"]
        for dependency in ("postgres", "redis", "qdrant"):
            assert depends[dependency]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_compose_migrates_once_before_the_processes_start() -> None:
    services = _compose()["services"]
    assert services["migrate"]["command"] == ["python", "-m", "app.migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["environment"]["STRATA_AUTO_MIGRATE"] == "false"
    api = services["api"]
    assert "--workers" in api["command"]
    # Several api processes add their metrics up in a directory that starts empty.
    assert api["environment"]["PROMETHEUS_MULTIPROC_DIR"] in api["tmpfs"]


def test_compose_environment_is_understood_by_settings() -> None:
    env = {k: str(v) for k, v in _compose()["services"]["worker"]["environment"].items()}
    assert env["STRATA_WORKER_METRICS_PORT"] == "9100"
    known = {f"STRATA_{name.upper()}" for name in Settings.model_fields}
    assert set(env) <= known, set(env) - known
    values: dict[str, Any] = {k.removeprefix("STRATA_").lower(): v for k, v in env.items()}
    settings = Settings.model_validate(values)
    assert not settings.is_sqlite
    assert settings.run_worker_in_process is False
    assert settings.qdrant_url == "http://qdrant:6333"


def test_a_database_url_alone_keeps_the_worker_with_the_embedded_index() -> None:
    """PostgreSQL without a Qdrant server: the Edge shard opens in the api only, so the
    worker stays there (setting a URL switches that one store, nothing else)."""
    settings = Settings(_env_file=None, database_url="postgresql+asyncpg://db/strata")
    assert not settings.is_sqlite
    assert settings.run_worker_in_process
    assert settings.refusal("api") is None
    with_qdrant = Settings(
        _env_file=None,
        database_url="postgresql+asyncpg://db/strata",
        qdrant_url="http://qdrant:6333",
    )
    assert with_qdrant.run_worker_in_process is False
    assert with_qdrant.refusal("worker") is None


def test_embedded_is_the_default() -> None:
    settings = Settings(_env_file=None)
    assert settings.is_sqlite
    assert settings.run_worker_in_process
    assert settings.qdrant_url is None
