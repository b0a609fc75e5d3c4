"""OpenTelemetry tracing for errands (``pip install 'errands[otel]'``).

``q.use(errands.otel.Tracing())`` gives a PRODUCER span per enqueued job and a CONSUMER span per
attempt, in one trace: the enqueue span's context is stored with the job (``jobs.headers``, W3C
``traceparent``/``tracestate`` through the configured propagator) and every attempt's span is its
child, so a trace reads request → enqueue → attempt 1 → attempt 2…, across processes and
restarts. The attempt's span is current while the handler runs: spans the handler makes are its
children. Spans carry the job's id, type, queue, attempt and outcome (``errands.job.*``) beside the
messaging conventions (``messaging.system="errands"``, destination = queue). Only
``opentelemetry-api`` is needed here; the application configures the SDK and exporters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .middleware import Enqueuing, Execution, Middleware

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        f"errands.otel needs OpenTelemetry: pip install 'errands[otel]' ({exc})"
    ) from exc

SYSTEM = "errands"


class Tracing(Middleware):
    """Middleware making spans for enqueues and attempts; see the module doc.

    ``tracer_provider``: where spans go (default: the global provider)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        from . import __version__

        self._tracer = trace.get_tracer("errands", __version__, tracer_provider=tracer_provider)

    def enqueue(self, job: Enqueuing) -> Iterator[None]:
        # Not made current: in enqueue_many the jobs' spans are siblings under the caller's span,
        # not nested in one another.
        span = self._tracer.start_span(
            f"enqueue {job.type}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.destination.name": job.queue,
                "errands.job.type": job.type,
                "errands.job.queue": job.queue,
            },
        )
        try:
            propagate.inject(job.headers, context=trace.set_span_in_context(span))
            yield
            if job.id is not None:
                span.set_attribute("errands.job.id", job.id)
                span.set_attribute("messaging.message.id", str(job.id))
            if job.error is not None:
                span.record_exception(job.error)
                span.set_status(Status(StatusCode.ERROR, type(job.error).__name__))
        finally:
            span.end()

    def execute(self, attempt: Execution) -> Iterator[None]:
        parent = propagate.extract(attempt.headers)
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": attempt.queue,
            "messaging.message.id": str(attempt.job_id),
            "errands.job.id": attempt.job_id,
            "errands.job.type": attempt.type,
            "errands.job.queue": attempt.queue,
            "errands.job.attempt": attempt.attempt,
            "errands.worker.id": attempt.worker_id,
        }
        with self._tracer.start_as_current_span(
            f"run {attempt.type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield
            span.set_attribute("errands.job.outcome", attempt.outcome or "unknown")
            if attempt.error_code is not None:
                span.set_attribute("errands.job.error_code", attempt.error_code)
            if attempt.exception is not None:
                span.record_exception(attempt.exception)
            if attempt.outcome in ("failed", "retrying"):
                span.set_status(Status(StatusCode.ERROR, attempt.error_code))


__all__ = ["Tracing"]
