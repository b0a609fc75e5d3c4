"""The queues page shows fair share per value and the ordered keys a failed head holds back
(docs/dashboard.md, docs/flow-control.md), on both backends; values are shown as text."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

import errands
from errands.backends.base import ClaimRequest, Failed
from errands.order import order_specs
from errands.tasks import declared_rows
from errands.web import create_app


def section(page: str, heading_id: str) -> str:
    """The page from a heading (by its id) to the next heading or the end of the content."""
    start = page.index(f'id="{heading_id}"')
    nxt = re.search(r"<h2 ", page[start:])
    return page[start : start + nxt.start()] if nxt else page[start:]


def test_the_queues_page_shows_each_fair_value(queue: errands.Queue) -> None:
    @queue.task(fair="tenant")
    def report(tenant: str, n: int) -> None: ...

    for n in range(3):
        report.enqueue(tenant="acme", n=n)
    report.enqueue(tenant="<b>globex</b>", n=0)
    page = TestClient(create_app(queue)).get("/queues").text
    fair = section(page, "fair-share")
    rows = re.findall(r'<tr data-fair="fair:tenant">(.*?)</tr>', fair, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    assert [c[1:5] for c in cells] == [
        ["acme", "3", "3", "0"],  # most due first: value, due, queued, running
        ["&lt;b&gt;globex&lt;/b&gt;", "1", "1", "0"],
    ]
    assert "<b>globex</b>" not in page


def test_the_queues_page_has_no_fair_or_order_section_without_them(
    queue: errands.Queue,
) -> None:
    queue.enqueue("plain", {})
    page = TestClient(create_app(queue)).get("/queues").text
    assert 'id="fair-share"' not in page and 'id="blocked-order"' not in page


def test_the_queues_page_names_a_blocked_ordered_key_and_links_its_head(
    queue: errands.Queue,
) -> None:
    q = queue

    @q.task(order="account", order_on_failure="block")
    def sync(account: str) -> None: ...

    head = sync.enqueue(account="acme")
    sync.enqueue(account="acme")
    now = q.clock()
    q.backend.declare_task_types(declared_rows(q.tasks, "w1"), now)  # as a worker does
    order = order_specs(t.options for t in q.tasks.values())
    request = ClaimRequest("w1", ["sync"], None, 5, 60.0, True, {}, order)
    (job,) = q.backend.claim(request, now)
    q.backend.finish([Failed(job.id, 1, now, "E", "boom", None)], "w1", now, held=[job])
    client = TestClient(create_app(q))
    blocked = section(client.get("/queues").text, "blocked-order")
    assert "value <b>acme</b>" in blocked and f'/jobs/{head}">#{head}</a>' in blocked
    q.retry(head)
    assert 'id="blocked-order"' not in client.get("/queues").text
