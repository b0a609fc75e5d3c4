"""``errands.otel.Tracing``: a PRODUCER span per enqueue and a CONSUMER span per attempt, one
trace from the enqueuing request to every attempt (the context travels in ``jobs.headers``),
checked with the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import errands
from errands.otel import Tracing


def attribute(span: ReadableSpan, name: str) -> Any:
    """One attribute of a finished span (the SDK types every value as a union of all kinds)."""
    assert span.attributes is not None, f"{span.name} has no attributes"
    return span.attributes[name]


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def test_one_trace_spans_request_enqueue_and_every_attempt(
    queue: errands.Queue, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    app_tracer = provider.get_tracer("the-app")
    queue.use(Tracing(tracer_provider=provider))

    @queue.task(max_attempts=2, backoff=errands.fixed(0))
    async def welcome(user: str, ctx: errands.JobContext) -> None:
        with app_tracer.start_as_current_span("render email"):  # the handler's own span
            if ctx.attempt == 1:
                raise errands.JobError("SMTP:BUSY", "try later")

    async def signup(request: Request) -> JSONResponse:
        # What an HTTP instrumentation does: the request's SERVER span is current.
        with app_tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER):
            job_id = await welcome.enqueue_async(user="ann")
        return JSONResponse({"job": job_id})

    app = Starlette(routes=[Route("/signup", signup, methods=["POST"])])

    async def request() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/signup")
        job_id: int = response.json()["job"]
        return job_id

    job_id = asyncio.run(request())
    queue.run_worker(burst=True, handle_signals=False)

    finished = exporter.get_finished_spans()
    (server,) = by_name(finished, "POST /signup")
    (producer,) = by_name(finished, "enqueue welcome")
    attempts = sorted(
        by_name(finished, "run welcome"), key=lambda s: attribute(s, "errands.job.attempt")
    )
    renders = by_name(finished, "render email")
    assert len(attempts) == 2 and len(renders) == 2

    trace_id = server.context.trace_id
    assert {s.context.trace_id for s in finished} == {trace_id}
    assert producer.kind is SpanKind.PRODUCER and producer.parent is not None
    assert producer.parent.span_id == server.context.span_id
    for attempt, render in zip(
        attempts, sorted(renders, key=lambda s: s.start_time or 0), strict=True
    ):
        assert attempt.kind is SpanKind.CONSUMER and attempt.parent is not None
        assert attempt.parent.span_id == producer.context.span_id
        assert render.parent is not None and render.parent.span_id == attempt.context.span_id

    assert producer.attributes is not None
    assert producer.attributes["errands.job.id"] == job_id
    assert producer.attributes["messaging.destination.name"] == "default"
    first, second = (dict(a.attributes or {}) for a in attempts)
    assert first["errands.job.id"] == second["errands.job.id"] == job_id
    assert (first["errands.job.type"], first["errands.job.queue"]) == ("welcome", "default")
    assert (first["errands.job.outcome"], first["errands.job.error_code"]) == (
        "retrying",
        "SMTP:BUSY",
    )
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert [e.name for e in attempts[0].events] == ["exception"]
    assert second["errands.job.outcome"] == "succeeded"
    assert attempts[1].status.status_code is StatusCode.UNSET

    job = queue.get(job_id)
    assert job is not None and job.headers is not None
    assert job.headers["traceparent"].split("-")[1] == format(trace_id, "032x")


def test_enqueue_many_makes_sibling_spans_and_sync_handlers_see_their_span(
    queue: errands.Queue, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    app_tracer = provider.get_tracer("the-app")
    queue.use(Tracing(tracer_provider=provider))

    @queue.task(max_attempts=1)
    def step(n: int) -> None:
        with app_tracer.start_as_current_span(f"work {n}"):
            if n == 2:
                raise ValueError("two")

    with app_tracer.start_as_current_span("batch") as batch:
        ids = queue.enqueue_many([("step", {"n": n}) for n in range(3)])
    queue.run_worker(burst=True, handle_signals=False)

    finished = exporter.get_finished_spans()
    producers = by_name(finished, "enqueue step")
    assert len(producers) == 3
    assert {p.parent.span_id for p in producers if p.parent} == {batch.get_span_context().span_id}
    runs = {attribute(s, "errands.job.id"): s for s in by_name(finished, "run step")}
    assert sorted(runs) == sorted(ids)
    for n, job_id in enumerate(ids):
        (work,) = by_name(finished, f"work {n}")
        assert work.parent is not None and work.parent.span_id == runs[job_id].context.span_id
    failed = runs[ids[2]]
    assert failed.attributes is not None and failed.attributes["errands.job.outcome"] == "failed"
    assert failed.status.status_code is StatusCode.ERROR
