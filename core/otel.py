"""OpenTelemetry tracing: on when the `[otel]` extra is installed and
OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the usual OTEL_* variables); off,
nothing here is imported and nothing costs anything.

One trace per proposal. The web request's span comes from the Django instrumentation, its
SQL from psycopg's. A worker dispatches the action later, woken by a message that names no
action, so the trace cannot travel in the message: it travels on the action row, as the
request id. When tracing is on, the request id *is* the request's trace id (a client's
X-Request-ID never replaces it; it is kept apart as the audit's `client_request_id`), and
the worker opens its `takeover.dispatch` (or `takeover.reconcile`) span in that trace; the
tool call is a child span (`tool_call_span`: tool calls go out on the standard library's
client, which no instrumentation sees) and the tool receives a `traceparent` of the same
trace.
Off, the tool still receives a `traceparent` whose trace id is the request id
(core/logs.py).

Quirk: the worker's span names the web request's trace but not its span (the row keeps
the id only), so trace viewers show it as a second root in the same trace.
"""

import contextlib
import logging
import os
import secrets

logger = logging.getLogger(__name__)

ENABLED = False


def setup(service_name: str, *, exporter=None) -> bool:
    """Install the tracer provider and the instrumentations once per process. `exporter`
    (tests) replaces the OTLP exporter. Returns whether tracing is on."""
    global ENABLED
    if ENABLED:
        return True
    if exporter is None and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the [otel] extra is not installed "
            "(pip install '.[otel]'); tracing stays off"
        )
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", service_name)
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument()  # webhooks and the other calls on httpx
    PsycopgInstrumentor().instrument(skip_dep_check=True)
    CeleryInstrumentor().instrument()
    ENABLED = True
    return True


def current_trace_id() -> str:
    """The current span's trace id as 32 hex digits; "" when tracing is off or no span."""
    if not ENABLED:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


@contextlib.contextmanager
def span_in_request_trace(name: str, request_id: str, **attributes):
    """A span in the trace whose id is `request_id` (a fresh trace if it is not one)."""
    if not ENABLED:
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    parent = None
    rid = (request_id or "").lower()
    if len(rid) == 32 and all(c in "0123456789abcdef" for c in rid) and int(rid, 16):
        remote = SpanContext(
            trace_id=int(rid, 16),
            span_id=int.from_bytes(secrets.token_bytes(8), "big") or 1,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        parent = trace.set_span_in_context(NonRecordingSpan(remote))
    tracer = trace.get_tracer("takeover")
    attributes = {k: str(v) for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(name, context=parent, attributes=attributes):
        yield


@contextlib.contextmanager
def tool_call_span(method: str, url, headers: dict):
    """A CLIENT span around one tool call, its `traceparent` put into `headers` (replacing
    the one core/logs.py set); yields a function that records the answer's status code."""
    if not ENABLED:
        yield lambda status: None
        return
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    tracer = trace.get_tracer("takeover")
    attributes = {"http.request.method": method, "url.full": str(url)}
    with tracer.start_as_current_span(method, kind=SpanKind.CLIENT, attributes=attributes) as span:
        headers.pop("traceparent", None)
        propagate.inject(headers)

        def answered(status: int) -> None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))

        yield answered
