"""Structured logs: one JSON object per line, each carrying the merge request it concerns.

The webhook handler and the worker set the project, merge request and head commit once with
`log_context(...)`; a filter copies them onto every record written inside that block (contextvars
follow `await` and `asyncio.to_thread`, so the pipeline's own log lines carry them too). Only the
fields named here are ever written: headers, tokens and payloads are never put on a record by us.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("reviewloop_log_context", default=None)
CONTEXT_FIELDS = ("project", "mr_iid", "head_sha", "event_id", "job_id")
# Attributes every LogRecord has; anything else a caller passed through `extra=` is written as well.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach `fields` (project, mr_iid, head_sha, ...) to every log line written inside the block."""
    current = dict(_CONTEXT.get() or {})
    current.update({k: v for k, v in fields.items() if v is not None})
    token = _CONTEXT.set(current)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_log_context() -> dict[str, Any]:
    return dict(_CONTEXT.get() or {})


class ContextFilter(logging.Filter):
    """Copies the active log context onto the record; every field is present (null when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _CONTEXT.get() or {}
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, context.get(name))
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            entry[name] = getattr(record, name, None)
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and key not in entry and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Route every logger (ours, uvicorn's, procrastinate's) through one JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers[:] = []
        uvicorn_logger.propagate = True
