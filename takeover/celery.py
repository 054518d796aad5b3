import os
import sys
from functools import cached_property

from celery import Celery
from celery.apps.beat import Beat as CeleryBeat
from celery.signals import setup_logging, worker_init, worker_ready
from celery.utils.log import LoggingProxy
from kombu.transport import TRANSPORT_ALIASES

# The default, serverless broker: our multi-process-safe variant of kombu's filesystem one.
TRANSPORT_ALIASES["filesystem"] = "takeover.broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")


class Beat(CeleryBeat):
    """`celery beat` prints its banner before it sets up logging; under LOG_FORMAT=json it
    sets up logging first, so that the banner is a JSON line like the rest (see
    `_project_logging`)."""

    def run(self) -> None:
        if os.environ.get("LOG_FORMAT", "plain") == "json":
            self.setup_logging()
        super().run()


class Takeover(Celery):
    @cached_property
    def Beat(self):
        return self.subclass_with_self(Beat)


app = Takeover("takeover")


@app.on_configure.connect
def _database(sender, **kwargs):
    # Sent just before the configuration (Django's settings) is first read: the embedded
    # PostgreSQL starts here when DATABASE_URL is unset, not when the package is imported.
    from .embedded_db import prepare

    prepare()


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _schedule_sweeps(sender, **kwargs):
    from django.conf import settings

    # A sweep nobody ran within one interval is superseded by the next: it expires, so
    # sweeps do not pile up in the broker while every worker is down.
    sender.add_periodic_task(
        settings.SWEEP_INTERVAL_SECONDS,
        sender.signature("runs.sweep", expires=settings.SWEEP_INTERVAL_SECONDS),
    )
    if settings.ARCHIVE_EVERY:
        from core.durations import parse_duration

        every = parse_duration(settings.ARCHIVE_EVERY).total_seconds()
        sender.add_periodic_task(
            every,
            sender.signature("runs.archive", expires=every, queue=settings.ARCHIVE_QUEUE or None),
        )


@worker_init.connect
def _serve_worker_metrics(**kwargs):
    from django.conf import settings

    from core.metrics import start_worker_exporter
    from core.otel import setup as tracing

    tracing("takeover-worker")  # off unless configured (core/otel.py)
    if settings.WORKER_METRICS_PORT:
        start_worker_exporter(settings.WORKER_METRICS_PORT, settings.WORKER_METRICS_ADDR)


@worker_ready.connect
def _freeze_startup_objects(**kwargs):
    """As the web does (takeover/gunicorn_conf.py): what is loaded at start lives as long as
    the process, so the cyclic collector stops scanning it, and collects less often."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


@setup_logging.connect
def _project_logging(loglevel=None, **kwargs):
    """Workers and beat log like the web: the project's LOGGING (LOG_FORMAT, the request id
    and action on each line), not Celery's own format. The level is LOG_LEVEL when it is
    set, else Celery's `--loglevel`.

    Under LOG_FORMAT=json, what Celery prints rather than logs (the worker's and beat's
    banners, which the worker writes to the original stdout) becomes a log record too: one
    JSON line per print."""
    import copy
    import logging

    from django.conf import settings

    from core.logs import configure

    config = copy.deepcopy(settings.LOGGING)
    if loglevel and "LOG_LEVEL" not in os.environ:
        name = logging.getLevelName(loglevel) if isinstance(loglevel, int) else loglevel
        config["root"]["level"] = str(name).upper()
    configure(config)
    if settings.LOG_FORMAT == "json" and not isinstance(sys.stdout, LoggingProxy):
        printed = LoggingProxy(logging.getLogger("celery.banner"), logging.INFO)
        sys.stdout = sys.__stdout__ = printed
