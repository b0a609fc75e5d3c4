"""Fair share through ``errands fair`` and ``q.fairness()``, on both backends
(docs/flow-control.md, "Fair share")."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import errands
from errands.cli import main
from errands.testing import drain


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_errands_fair_shows_due_running_and_served_per_value(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    @queue.task(fair="tenant")
    def sync(tenant: str, n: int = 0) -> None: ...

    sync.enqueue(tenant="acme")
    drain(queue)
    queue.enqueue_many([("sync", {"tenant": "bolt", "n": i}) for i in range(3)])
    queue.enqueue("sync", {"tenant": "bolt"}, delay=3600)  # queued, not due
    infos = {i.value: i for i in queue.fairness()}
    assert (infos["acme"].served, infos["acme"].due) == (1, 0)
    assert (infos["bolt"].due, infos["bolt"].queued, infos["bolt"].running) == (3, 4, 0)

    # The CLI has no tasks: it finds the key by its stored turns.
    code, out, _ = run(["fair", "--json", "--db", db_url], capsys)
    assert code == 0
    rows = {r["value"]: r for r in json.loads(out)}
    assert rows["acme"]["served"] == 1 and rows["bolt"]["due"] == 3
    assert rows["bolt"]["key"] == "fair:tenant" and rows["bolt"]["minutes"] == 5.0
    code, out, _ = run(["fair", "--minutes", "1", "--db", db_url], capsys)
    assert code == 0 and "bolt" in out and "SERVED 1M" in out
    # `errands limits` lists the values under the key fair:<field>.
    code, out, _ = run(["limits", "--json", "--db", db_url], capsys)
    (limit,) = [r for r in json.loads(out) if r["key"] == "fair:tenant"]
    assert limit["groups"]["bolt"] == {"running": 0, "waiting": 4}


def test_bad_minutes_are_refused_with_the_range(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["fair", "--minutes", "0", "--db", db_url], capsys)
    assert code == 2 and "at most 1440" in err
    with pytest.raises(errands.ConfigurationError, match="at most 1440"):
        queue.fairness(minutes=-1)


def test_a_fair_key_a_worker_declares_shows_before_its_first_turn(
    db_url: str, make_queue: Callable[..., errands.Queue], capsys: pytest.CaptureFixture[str]
) -> None:
    worker = make_queue()

    @worker.task(fair="tenant", queue="sync")
    def sync(tenant: str) -> None: ...

    worker.run_worker(burst=True, concurrency=1)  # declares its tasks; nothing to run yet
    worker.enqueue_many([("sync", {"tenant": t}) for t in ("acme", "acme", "bolt")])
    # A tool without the app (the CLI, a standalone dashboard) finds the key by the
    # worker's declaration: no claim has stored a turn yet.
    bare = make_queue()
    assert [(i.key, i.value, i.due) for i in bare.fairness()] == [
        ("fair:tenant", "acme", 2),
        ("fair:tenant", "bolt", 1),
    ]
    code, out, _ = run(["fair", "--json", "--db", db_url], capsys)
    assert code == 0
    assert {r["value"]: r["due"] for r in json.loads(out)} == {"acme": 2, "bolt": 1}
