"""Pipelines: chains and batches, built on ``after=`` (docs/pipelines.md).

A chain is jobs each enqueued after the one before; a batch is member jobs plus a callback
enqueued after all of them with ``on_upstream_failure="run"``. Both are written by one
enqueue (one transaction), so either every job and edge is stored or none is; the release
of each waiting job rides in the transaction of its last upstream's outcome
(backends/deps.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..backends.base import Needs
from ..core.states import State
from ..errors import ConfigurationError, JobNotFoundError
from .enqueueing import Batch as Checked
from .enqueueing import EnqueueItem, Producer, item_options

if TYPE_CHECKING:
    from ..backends.verbs import Backend


def chain(
    producer: Producer, items: Iterable[EnqueueItem], actor: str, connection: Any
) -> list[int]:
    """Store ``items`` so that each runs after the one before (a failure cancels the rest,
    unless an item says ``on_upstream_failure="run"``); returns their ids in order."""
    listed = list(items)
    checked = producer.many(listed)  # checks every item, on_upstream_failure included
    if not checked.jobs:
        return []
    own = checked.needs or [None] * len(checked.jobs)
    needs: list[Needs | None] = [own[0]]
    for k in range(1, len(checked.jobs)):
        mine = own[k]
        needs.append(Needs(mine.ids if mine else (), (k - 1,), _rule(listed[k])))
    return producer.store(Checked(checked.jobs, checked.now, needs), actor, connection)


def _rule(item: Any) -> str:
    """An item's on_upstream_failure (already checked by ``Producer.many``)."""
    return item_options(item[2]).on_upstream_failure if len(item) == 3 else "cancel"


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """``q.get_batch(id)``: a batch's callback job and its members per state."""

    id: int  # the callback job's id (batch.id)
    status: str  # the callback's
    counts: dict[str, int]  # members per state, every state present
    total: int

    @property
    def done(self) -> bool:
        """Every member final (the callback is then queued, running or final)."""
        return self.total == sum(self.counts[s.value] for s in _FINAL)


_FINAL = (State.SUCCEEDED, State.FAILED, State.CANCELLED)


@dataclass
class JobBatch:
    """``with q.batch(on_complete=(type, payload)) as batch:`` — members enqueued with
    ``batch.enqueue`` are stored, with the callback after all of them, when the block exits
    without an exception (one transaction: all or nothing). Then ``batch.id`` (the callback
    job's id, for ``q.get_batch``) and ``batch.ids`` (the members') are set."""

    producer: Producer
    on_complete: tuple[Any, ...]
    actor: str
    connection: Any
    items: list[EnqueueItem] = field(default_factory=list)
    id: int | None = None
    ids: list[int] = field(default_factory=list)

    def enqueue(self, job_type: str, payload: Any = None, **options: Any) -> None:
        """Add a member (``q.enqueue``'s options, but ``connection``: the batch's own)."""
        if self.id is not None:
            raise ConfigurationError("this batch is already stored; start a new q.batch()")
        self.items.append((job_type, payload, options) if options else (job_type, payload))

    def enqueue_many(self, items: Iterable[EnqueueItem]) -> None:
        for item in items:
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise ConfigurationError(
                    f"batch.enqueue_many takes (type, payload[, options]) tuples, got {item!r:.60}"
                )
            if len(item) == 3:
                self.items.append((item[0], item[1], item_options(item[2])))
            else:
                self.enqueue(item[0], item[1])

    def __enter__(self) -> JobBatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            return  # nothing was written: the members live only in this object
        members = len(self.items)
        checked = self.producer.many([*self.items, self.on_complete])
        own = checked.needs or [None] * len(checked.jobs)
        callback = own[-1]
        needs: list[Needs | None] = [*own[:-1]]
        # An empty batch: the callback has nothing to wait for and is queued at once.
        needs.append(
            Needs(callback.ids if callback else (), tuple(range(members)), "run")
            if members or callback
            else None
        )
        batch = Checked(checked.jobs, checked.now, needs if any(needs) else None)
        ids = self.producer.store(batch, self.actor, self.connection)
        self.ids, self.id = ids[:-1], ids[-1]


def on_complete_item(on_complete: Any) -> tuple[Any, ...]:
    if not isinstance(on_complete, tuple) or len(on_complete) not in (2, 3):
        raise ConfigurationError(
            "on_complete takes the callback job as (type, payload) or (type, payload, options), "
            f"got {on_complete!r:.60}"
        )
    return on_complete


def get_batch(backend: Backend, batch_id: int) -> BatchInfo:
    job = backend.get_job(batch_id)
    if job is None:
        raise JobNotFoundError(
            f"no batch with id {batch_id} (a batch's id is its callback job's id, batch.id)"
        )
    found = backend.upstream_counts(batch_id)
    counts = {s.value: found.get(s.value, 0) for s in State}
    return BatchInfo(batch_id, job.status, counts, sum(counts.values()))


def graph(backend: Backend, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """The jobs around one: ``upstream`` (it runs after them) and ``downstream`` (they run
    after it), each ``{id, type, status, on_upstream_failure}`` — for show, deps and the
    JSON API."""

    def rows(edges: Sequence[tuple[Any, str]]) -> list[dict[str, Any]]:
        return [
            {"id": j.id, "type": j.type, "status": j.status, "on_upstream_failure": rule}
            for j, rule in edges
        ]

    return {
        "upstream": rows(backend.upstream(job_id)),
        "downstream": rows(backend.downstream(job_id)),
    }
