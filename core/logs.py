"""Log context: who and what a log line is about, from the web request to the tool call.

The context variables below (`request_id_var` also goes into every audit row) are set by
the request middleware, the API authentication and the dispatcher; `ContextFilter` copies
them onto every log record, so that both the plain and the JSON format (`LOG_FORMAT=json`)
show them without each call site passing them.

Context variables, not thread-locals: the Celery threads pool runs one task per thread,
gunicorn's gthread workers one request per thread, and each keeps its own values.
"""

import contextlib
import contextvars
import logging
import logging.config
import secrets
from datetime import UTC, datetime

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

# Imported by settings' LOGGING before the app registry is ready: no model imports here.
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
tenant_var: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="")
# "principal:<name>" or "operator:<username>", as the audit log names actors.
actor_var: contextvars.ContextVar[str] = contextvars.ContextVar("actor", default="")
run_var: contextvars.ContextVar[str] = contextvars.ContextVar("run", default="")
action_var: contextvars.ContextVar[str] = contextvars.ContextVar("action", default="")

CONTEXT = {
    "request_id": request_id_var,
    "tenant": tenant_var,
    "actor": actor_var,
    "run_id": run_var,
    "action_id": action_var,
}


@contextlib.contextmanager
def log_context(**values):
    """Set some of CONTEXT's variables for the block, and restore them after it."""
    tokens = [(CONTEXT[k], CONTEXT[k].set(str(value or ""))) for k, value in values.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class ContextFilter(logging.Filter):
    """Puts the context on every record (as attributes), empty where unknown."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in CONTEXT.items():
            if not hasattr(record, name):
                setattr(record, name, var.get())
        return True


class PlainFormatter(logging.Formatter):
    """The human format, with the request id (and action) in brackets when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", "")
        action = getattr(record, "action_id", "")
        if rid or action:
            tag = " ".join(filter(None, [f"rid={rid}" if rid else "", action and f"act={action}"]))
            line = f"{line} [{tag}]"
        return line


class JsonFormatter(_JsonFormatter):
    """One JSON object per line: time, level, logger, message, the context (only the keys
    that are known), and any `extra=` the call site gave. `time` is RFC 3339 with its
    offset, in UTC (`2026-12-01T09:30:00.123+00:00`)."""

    def formatTime(self, record, datefmt=None):
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")

    def add_fields(self, log_record, record, message_dict):
        super().add_fields(log_record, record, message_dict)
        for name in CONTEXT:
            if not log_record.get(name):
                log_record.pop(name, None)


FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def json_formatter() -> JsonFormatter:
    """The formatter of LOG_FORMAT=json, for every process: the web (Django's LOGGING and
    gunicorn's own logs, takeover/gunicorn_conf.py), workers and beat (takeover/celery.py)."""
    return JsonFormatter(
        FORMAT, rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}
    )


def configure(config: dict) -> None:
    """LOGGING_CONFIG: Django's dictConfig, and then Python's warnings go through logging
    too, so that under LOG_FORMAT=json a deprecation warning is a JSON line like any other."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)


def traceparent() -> str:
    """A W3C `traceparent` for a call made on behalf of the current request.

    The trace id is the request id when that is already 32 hex digits (ours are), so the
    tool's logs can be joined to ours by it; otherwise a fresh one. A new span id per call.
    """
    rid = request_id_var.get().lower()
    if len(rid) != 32 or any(c not in "0123456789abcdef" for c in rid) or set(rid) == {"0"}:
        rid = secrets.token_hex(16)
    return f"00-{rid}-{secrets.token_hex(8)}-01"
