"""The job page shows the graph around a job (docs/pipelines.md): the jobs it runs after and
the jobs waiting for it, each linked with its state, on both backends — and escaped like every other
value that comes from a job."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

import errands
from errands.web import create_app

XSS = "<script>alert(1)</script>"


def items(html: str, list_id: str) -> list[str]:
    match = re.search(rf'<ul class="deps-list" id="{list_id}">(.*?)</ul>', html, re.S)
    return [] if match is None else re.findall(r'href="[^"]*/jobs/(\d+)"', match.group(1))


def test_the_job_page_draws_upstream_and_downstream(queue: errands.Queue) -> None:
    a = queue.enqueue("extract", {"part": 1})
    b = queue.enqueue(XSS, {"part": 2})
    c = queue.enqueue("merge", {}, after=[a, b])
    d = queue.enqueue("report", {}, after=[c], on_upstream_failure="run")
    client = TestClient(create_app(queue))

    middle = client.get(f"/jobs/{c}").text
    assert sorted(items(middle, "upstream")) == sorted([str(a), str(b)])
    assert items(middle, "downstream") == [str(d)]
    assert "on failure: run" in middle
    assert "cancelled (<code>UPSTREAM:FAILED</code>)" in middle  # c's own rule: cancel
    assert XSS not in middle and "&lt;script&gt;alert(1)&lt;/script&gt;" in middle

    top = client.get(f"/jobs/{a}").text
    assert items(top, "upstream") == [] and items(top, "downstream") == [str(c)]
    last = client.get(f"/jobs/{d}").text
    assert items(last, "upstream") == [str(c)] and "queued anyway" in last


def test_a_job_without_dependencies_has_no_graph(queue: errands.Queue) -> None:
    job_id = queue.enqueue("alone", {})
    html = TestClient(create_app(queue)).get(f"/jobs/{job_id}").text
    assert "<h2>Dependencies</h2>" not in html
