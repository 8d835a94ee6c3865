"""Structured logs: one JSON object per line, carrying the request id (api) or the job id
(worker) of the work that wrote it, so one grep follows a request or a job end to end.

The ids live in context variables: set once where the work starts (the request-id
middleware, the job runner), read by the formatter, never threaded through calls.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None
)
job_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("job_id", default=None)

_HANDLER_NAME = "strata"

# Attributes every LogRecord has; anything else was passed with `extra=` and is kept.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if (rid := request_id_var.get()) is not None:
            entry["request_id"] = rid
        if (jid := job_id_var.get()) is not None:
            entry["job_id"] = jid
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """For a person at a terminal: the same ids, on one readable line."""

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{name}={value}"
            for name, value in (("request_id", request_id_var.get()), ("job_id", job_id_var.get()))
            if value is not None
        )
        line = f"{record.levelname} {record.name}: {record.getMessage()}"
        if ids:
            line = f"{line} [{ids}]"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure(level: str = "INFO", fmt: Literal["json", "text"] = "json") -> None:
    """Route our loggers and uvicorn's through one handler on stderr. Called at the start of
    the api lifespan and of the worker, so uvicorn's own set-up (done before) is replaced."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    # Replace only our own handler: a second app in one process (tests) or a host that
    # installed its own (pytest's capture) keeps what it has.
    root.handlers = [h for h in root.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
        # uvicorn sets its loggers to INFO, which a propagated record never rechecks against
        # the root's level: `level` WARNING still wrote an access line per request (~7% of
        # a recall's server CPU, profiled). Inherited, `level` decides for them too.
        logger.setLevel(logging.NOTSET)
