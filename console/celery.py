import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

# The default, serverless broker: our multi-process-safe variant of kombu's filesystem one.
TRANSPORT_ALIASES["filesystem"] = "console.broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("takeover")
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
