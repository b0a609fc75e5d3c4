"""`errands check` reports a value of an ordered key held back by its failed head
(order_on_failure="block"), both backends (docs/flow-control.md, "Order per key")."""

from __future__ import annotations

import pytest

import errands
from errands.backends.base import ClaimRequest, Failed
from errands.cli import main
from errands.order import order_specs
from errands.tasks import declared_rows


def check(db_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(["check", "--max-wait", "1d", "--db", db_url])
    except SystemExit:
        pass
    return capsys.readouterr().out


def test_check_names_the_blocked_key_and_its_head(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
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
    assert q.backend.claim(request, now) == []  # blocked
    out = check(db_url, capsys)
    assert f"ordered key 'order:account' value 'acme' is blocked by failed job #{head}" in out
    q.retry(head)
    assert "is blocked by failed job" not in check(db_url, capsys)
