"""gunicorn configuration for Takeover:
`gunicorn -c python:takeover.gunicorn_conf takeover.wsgi`. Everything a deployer would
otherwise have to remember lives here.

**Metrics that add up.** gunicorn runs several worker processes; a scrape reaches one of
them. Each master therefore makes a directory of its own for prometheus_client's
multiprocess mode (under `PROMETHEUS_MULTIPROC_DIR` when that is set, else the system's
temporary directory), hands it to its workers through the environment before they start,
and removes it when it exits. Every process's counters live in files there, those of
workers that were restarted included, so `/metrics` from any worker sums them all and no
counter goes backwards. The directory is private to this master: no Celery worker writes
there, so nothing is counted twice (workers serve their own series, core/metrics.py).

**One log format.** Under `LOG_FORMAT=json`, gunicorn's own lines (start, workers booting
and exiting, errors, the access log when it is on) go through the project's JSON formatter
(core/logs.py), like Django's.

gunicorn answers some malformed requests itself, before Django sees them: a request line
over `limit_request_line` (414), headers over `limit_request_field_size` or too many of
them (431), an unparseable request (400). Its built-in answer is an HTML page, and gunicorn
has no setting for that page; this module replaces the one function that writes it, so
those answers are RFC 9457 problem+json like every other error of the API (docs/design.md,
"The API's conventions").
"""

import json
import os
import shutil
import tempfile

from gunicorn import glogging, util

SLUGS = {403: "permission-denied", 500: "internal-error"}


def write_problem(sock, status_int, reason, mesg):
    body = json.dumps(
        {
            "type": f"/problems/{SLUGS.get(status_int, 'validation-error')}",
            "title": reason,
            "status": status_int,
            "detail": mesg or reason,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin1") + body)


# gunicorn's workers call util.write_error by module attribute, so this takes effect in
# every worker forked from a master that read this configuration.
util.write_error = write_problem


def post_worker_init(worker):
    """Everything loaded by now (Django, the apps, the URL conf) lives as long as the
    process: `gc.freeze()` takes it out of the cyclic collector's scans, and a larger first
    generation makes collections rarer (a request allocates thousands of objects, almost
    none of them in cycles)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


# --- metrics -------------------------------------------------------------------------------

# Set when this module is imported, in the master, before any worker is forked: the workers
# import prometheus_client after the fork and find it (and so use multiprocess mode).
_METRICS_DIR = tempfile.mkdtemp(
    prefix="takeover-gunicorn-metrics-", dir=os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _METRICS_DIR


def child_exit(server, worker):
    """A worker is gone: its live gauges stop counting (its counters stay, as they must)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    shutil.rmtree(_METRICS_DIR, ignore_errors=True)


# --- logs ----------------------------------------------------------------------------------


class Logger(glogging.Logger):
    """gunicorn's logger, with the project's JSON formatter on its handlers under
    LOG_FORMAT=json; unchanged otherwise."""

    def setup(self, cfg):
        super().setup(cfg)
        if os.environ.get("LOG_FORMAT", "plain") != "json":
            return
        from core.logs import ContextFilter, json_formatter

        formatter = json_formatter()
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)
                handler.addFilter(ContextFilter())


logger_class = Logger
