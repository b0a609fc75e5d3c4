"""The guides' examples run: every ```python block of docs/async.md, docs/observing.md,
docs/flow-control.md, docs/pipelines.md and docs/durable-steps.md is executed in order, in one
namespace, on each backend (``"app.db"`` and the example PostgreSQL URL become the test's
database). A block after ``<!-- guide: postgres only -->`` runs only on PostgreSQL (``sqlite
only``: only on SQLite). What the examples claim is asserted in them; this file checks the
rest (the trace, the Sentry event, the log line)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import sentry_sdk
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import errands

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"(?:<!-- guide: ([^>]*?) -->\n)?```python\n(.*?)```", re.S)


def blocks(name: str) -> list[tuple[str, str]]:
    """(marker, code) per example; the code is padded with blank lines so tracebacks give
    the line numbers of the .md file."""
    text = (DOCS / name).read_text()
    found = [
        (m.group(1) or "", "\n" * text.count("\n", 0, m.start(2)) + m.group(2))
        for m in BLOCK.finditer(text)
    ]
    assert found, f"no python examples in docs/{name}"
    return [(marker.strip(), code) for marker, code in found]


def run_guide(name: str, db_url: str, is_sqlite: bool) -> tuple[dict[str, Any], int]:
    """Run a guide's examples; returns their namespace and how many blocks ran."""
    namespace: dict[str, Any] = {"__name__": f"guide_{name.removesuffix('.md')}"}
    ran = 0
    try:
        for marker, code in blocks(name):
            if (marker == "postgres only" and is_sqlite) or (
                marker == "sqlite only" and not is_sqlite
            ):
                continue
            assert marker in ("", "postgres only", "sqlite only"), f"unknown marker {marker!r}"
            code = code.replace('"app.db"', repr(db_url))
            code = code.replace('"postgresql://app@localhost/app"', repr(db_url))
            exec(compile(code, str(DOCS / name), "exec"), namespace)
            ran += 1
    finally:
        q = namespace.get("q")
        if q is not None:
            q.close()
    return namespace, ran


def test_async_guide_runs(db_url: str, is_sqlite: bool) -> None:
    _, ran = run_guide("async.md", db_url, is_sqlite)
    total = len(blocks("async.md"))
    assert ran == (total - 1 if is_sqlite else total)


def test_pipelines_guide_runs(db_url: str, is_sqlite: bool) -> None:
    namespace, ran = run_guide("pipelines.md", db_url, is_sqlite)
    assert ran == len(blocks("pipelines.md")) == 5
    assert namespace["batch"].id is not None


def test_durable_steps_guide_runs(db_url: str, is_sqlite: bool) -> None:
    namespace, ran = run_guide("durable-steps.md", db_url, is_sqlite)
    total = len(blocks("durable-steps.md"))
    assert ran == (total if is_sqlite else total - 1)
    if "app" in namespace:
        namespace["app"].close()


def test_flow_control_guide_runs(db_url: str, is_sqlite: bool) -> None:
    _, ran = run_guide("flow-control.md", db_url, is_sqlite)
    assert ran == len(blocks("flow-control.md"))
    # What the blocks do not assert themselves: everything the guide enqueued ran (but the
    # snooze loop the guide shows ending with SNOOZE:LIMIT, the job it shows expire, and the
    # ordered job it shows fail, and the one it shows fail at its deadline).
    with errands.Queue(db_url) as q:
        jobs = q.jobs(limit=1000)
        assert [j.type for j in jobs if j.error_code == "SNOOZE:LIMIT"] == ["wait_for_export"]
        assert [j.type for j in jobs if j.error_code == "EXPIRED:QUEUE"] == ["notify"]
        assert [j.type for j in jobs if j.error_code == "DEADLINE:EXCEEDED"] == ["charge"]
        ended = {"SNOOZE:LIMIT", "EXPIRED:QUEUE", "DEADLINE:EXCEEDED"}
        # The failed head the guide shows the next job going on after ("Order per key").
        failed = [j for j in jobs if j.status == "failed" and j.error_code not in ended]
        assert [(j.type, j.payload["n"]) for j in failed] == [("post", 1)]
        rest = {j.status for j in jobs if j.error_code not in ended and j not in failed}
        assert rest == {"succeeded"}


class CapturingTransport(Transport):
    """A Sentry transport that keeps envelopes instead of sending them."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)


_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="session")
def global_tracing() -> InMemorySpanExporter:
    """The guide uses the global tracer provider, which can be set once per process."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    return _EXPORTER


@pytest.fixture
def sentry_transport() -> Iterator[CapturingTransport]:
    """sentry_sdk initialised with a transport that keeps what would be sent."""
    transport = CapturingTransport()
    sentry_sdk.init(
        dsn="https://public@sentry.example.invalid/1",
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    try:
        yield transport
    finally:
        client = sentry_sdk.get_client()
        client.close()
        sentry_sdk.get_global_scope().set_client(None)


def test_observing_guide_runs(
    db_url: str,
    is_sqlite: bool,
    global_tracing: InMemorySpanExporter,
    sentry_transport: CapturingTransport,
    caplog: pytest.LogCaptureFixture,
) -> None:
    global_tracing.clear()
    with caplog.at_level(logging.INFO):
        _, ran = run_guide("observing.md", db_url, is_sqlite)
    sentry_sdk.flush()
    sentry_events = [e for env in sentry_transport.envelopes if (e := env.get_event())]
    assert ran == len(blocks("observing.md"))

    # The Timing example's log line, with the header the enqueue hook stored.
    assert any(
        r.name == "app" and "succeeded" in r.getMessage() and "from web-1" in r.getMessage()
        for r in caplog.records
    )
    # Buggy's failure: once per attempt run after it was registered (dog.png and bird.png
    # twice each — resize fails its first attempt — and charge once).
    bugs = [r for r in caplog.records if r.name == "errands" and "raised during" in r.message]
    assert len(bugs) == 5

    # One trace: the request span → enqueue bird.png → its attempt.
    spans = global_tracing.get_finished_spans()
    (request,) = [s for s in spans if s.name == "POST /resize"]
    producers = [s for s in spans if s.name == "enqueue resize" and s.parent is not None]
    (producer,) = [p for p in producers if p.parent and p.parent.span_id == request.context.span_id]
    runs = [s for s in spans if s.name == "run resize" and s.parent is not None]
    mine = [r for r in runs if r.parent and r.parent.span_id == producer.context.span_id]
    mine.sort(key=lambda s: cast(int, s.attributes["errands.job.attempt"] if s.attributes else 0))
    assert {r.context.trace_id for r in mine} == {request.context.trace_id}
    assert all(r.kind is SpanKind.CONSUMER for r in mine)
    assert [r.attributes["errands.job.outcome"] for r in mine if r.attributes] == [
        "retrying",
        "succeeded",
    ]

    # The Sentry recipe reported the final failure, with errands' tags.
    (event,) = [e for e in sentry_events if e.get("exception")]
    assert event["exception"]["values"][-1]["type"] == "ConnectionError"
    assert event["tags"]["errands.error_code"] == "INTERNAL:ConnectionError"
    assert event["tags"]["errands.job.type"] == "charge"
    assert event["contexts"]["errands"]["attempt"] == 1


def test_the_tracing_example_runs_as_copied_in_a_fresh_process(tmp_path: Path, db_url: str) -> None:
    """In a process where nothing configured OpenTelemetry (the test above sets a provider
    for the whole session, so it cannot tell): the guide's own provider lines are what makes
    a traceparent be stored."""
    upto: list[str] = []
    for _, code in blocks("observing.md"):
        upto.append(code.replace('"app.db"', repr(db_url)))
        if "from errands.otel import Tracing" in code:
            break
    (tmp_path / "guide.py").write_text("\n".join(upto) + "\nq.close()\n")
    done = subprocess.run(
        [sys.executable, "guide.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$", done.stdout, re.M), done.stdout
    assert '"name": "run resize"' in done.stdout  # the console exporter printed the spans
