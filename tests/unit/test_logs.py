"""Structured logs carry the ids of the work that wrote them."""

from __future__ import annotations

import logging
import sys

import orjson

from app.logs import JsonFormatter, TextFormatter, configure, job_id_var, request_id_var


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"name": "strata.test", "levelname": "WARNING", "msg": msg})
    record.__dict__.update(extra)
    return record


def test_json_line_carries_request_and_job_ids_and_extras() -> None:
    token_r, token_j = request_id_var.set("req-1"), job_id_var.set("job-9")
    try:
        line = JsonFormatter().format(_record("hello %s", session_id="s-1"))
    finally:
        request_id_var.reset(token_r)
        job_id_var.reset(token_j)
    entry = orjson.loads(line)
    assert entry["msg"] == "hello %s"
    assert entry["request_id"] == "req-1"
    assert entry["job_id"] == "job-9"
    assert entry["session_id"] == "s-1"
    assert entry["level"] == "warning"
    assert entry["logger"] == "strata.test"


def test_ids_absent_outside_a_request_or_job() -> None:
    entry = orjson.loads(JsonFormatter().format(_record("idle")))
    assert "request_id" not in entry
    assert "job_id" not in entry


def test_exceptions_are_kept_in_one_json_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in orjson.loads(line)["exc"]


def test_text_format_names_the_ids() -> None:
    token = request_id_var.set("req-2")
    try:
        line = TextFormatter().format(_record("hi"))
    finally:
        request_id_var.reset(token)
    assert line == "WARNING strata.test: hi [request_id=req-2]"


def test_the_configured_level_applies_to_uvicorns_access_log() -> None:
    root = logging.getLogger()
    access = logging.getLogger("uvicorn.access")
    saved = (root.level, list(root.handlers), access.level, access.handlers, access.propagate)
    try:
        access.setLevel(logging.INFO)  # as uvicorn's own set-up leaves it
        configure("WARNING")
        assert not access.isEnabledFor(logging.INFO)
        configure("INFO")
        assert access.isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        root.handlers = saved[1]
        access.setLevel(saved[2])
        access.handlers, access.propagate = saved[3], saved[4]


def test_building_the_mcp_server_leaves_the_root_logger_as_it_was() -> None:
    # The SDK's constructor calls logging.basicConfig, which acts only on a root logger
    # without handlers: as the api's is when create_app builds the MCP endpoint.
    from app.mcp import build_server

    root = logging.getLogger()
    kept, level = list(root.handlers), root.level
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        build_server()
        assert root.handlers == []
        assert root.level == logging.WARNING
    finally:
        root.handlers = kept
        root.setLevel(level)
