"""From an enqueue call to stored jobs: checks, middleware, the write, the wake-up.

``Queue.enqueue`` / ``enqueue_many`` and their async twins are thin over a ``Producer``: it
checks every job before anything is written (errors name the item of an ``enqueue_many``),
runs the enqueue middleware around the write, writes through the backend (blocking, or on
the event loop) and wakes this process's workers. The blocking and the async paths share all
of it but the write itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from itertools import repeat
from operator import attrgetter, is_, itemgetter
from typing import Any, NamedTuple, TypeVar

from ..backends.base import Backend, Needs, NewJob
from ..core import payload as payload_json
from ..core import validate
from ..core.settings import Duration
from ..errors import ConfigurationError, ErrandsError, PayloadError, UnknownTaskError
from ..middleware import Chain, Enqueuing, encode_headers
from ..tasks import Task, TaskOptions
from .declared import DeclaredOptions
from .grouping import GroupCommitter

log = logging.getLogger("errands")
R = TypeVar("R")

EnqueueItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]
ITEM_OPTIONS = frozenset(
    {
        "queue",
        "priority",
        "run_at",
        "delay",
        "max_attempts",
        "unique_key",
        "after",
        "on_upstream_failure",
    }
)
_RUN_AT = attrgetter("run_at")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_NO_TASK_OPTIONS = TaskOptions()  # for types another service runs: the defaults

# What to call once the write is done (ids, or the error); None when no middleware hooks in.
After = Callable[[list[int] | None, BaseException | None], None] | None


class Batch(NamedTuple):
    """Checked jobs ready to write, and the time they were checked at; ``needs``: what each
    job waits for (None: no job of the batch waits, the plain enqueue)."""

    jobs: list[NewJob]
    now: float
    needs: list[Needs | None] | None = None


def needs_of(after: Any, on_upstream_failure: Any = "cancel") -> Needs | None:
    """``after=`` and ``on_upstream_failure`` checked, as what the job waits for."""
    ids = validate.after(after, on_upstream_failure)
    return None if ids is None else Needs(ids, (), on_upstream_failure)


class Producer:
    """Turns enqueue calls into stored jobs. Given only what it uses: the backend, the task
    registry (read live: tasks may be registered later), the payload limit, the clock, the
    current middleware chain, this process's wake-up and the Queue's off-loop executor."""

    def __init__(
        self,
        backend: Backend,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        max_payload_bytes: int,
        clock: Callable[[], float],
        chain: Callable[[], Chain | None],
        wake: Callable[[], None],
        off_loop: Callable[[Callable[[], list[int]]], Awaitable[list[int]]],
        group: GroupCommitter | None = None,
        declared: DeclaredOptions | None = None,
        refuse: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.declared = declared  # task_types, for types this process has no task for
        self.refuse = refuse  # raises when this database takes no new jobs (graduated)
        self.tasks = tasks
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self.chain = chain
        self.wake = wake
        self.off_loop = off_loop
        self.group = group  # concurrent calls share a commit (grouping.py); None: each its own

    # -- checking --------------------------------------------------------------------------

    def one(
        self,
        job_type: str,
        payload: Any,
        queue: str | None,
        priority: int | None,
        run_at: datetime | float | None,
        delay: Duration | None,
        max_attempts: int | None,
        unique_key: str | None,
        after: Any = None,
        on_upstream_failure: Any = "cancel",
    ) -> Batch:
        """One ``enqueue`` call's job, checked."""
        need = needs_of(after, on_upstream_failure)
        now = self.clock()
        job = self.job(
            now,
            job_type,
            payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            unique_key=unique_key,
        )
        return Batch([job], now, None if need is None else [need])

    def many(self, items: Iterable[EnqueueItem]) -> Batch:
        """An ``enqueue_many`` call's jobs, every one checked before any is written.

        The common item, ``(type, payload)`` of a type already seen in this call, takes a
        short path: the type's checks and defaults are looked up once per call (not cached
        across calls: tasks registered meanwhile change what a type means), and its payload
        is checked and encoded later with the other short-path payloads, in one pass
        (``payload.encode_checked``), or one by one when that pass sees a hint of a bad one.
        Errors keep naming the first bad item: the pending payloads are checked, and may
        fail first, before a later item's error is raised."""
        now = self.clock()
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise ConfigurationError(
                "enqueue_many takes a list of (type, payload) or (type, payload, options) "
                f"tuples, got {type(items).__name__}"
            )
        if type(items) is list:
            alike = self._alike(items, now)
            if alike is not None:
                return alike
        jobs: list[NewJob] = []
        needs: list[Needs | None] | None = None
        append = jobs.append
        kinds: dict[str, tuple[Task[Any, Any] | None, TaskOptions]] = {}
        check = payload_json.check
        # The short path's payloads, their text filled in by _encode_pending; the items that
        # took the long path (their jobs are encoded already), by number.
        values: list[Any] = []
        others: list[int] = []
        n = 0
        try:
            for n, item in enumerate(items):
                if not isinstance(item, tuple) or len(item) not in (2, 3):
                    raise PayloadError(
                        f"enqueue_many item {n} must be (type, payload) or (type, payload, "
                        f"options), got {item!r:.80}"
                    )
                if len(item) == 2:
                    job_type, payload = item
                    kind = kinds.get(job_type) if type(job_type) is str else None
                    if kind is None:
                        kind = kinds[job_type] = self.kind(job_type)
                    task, opts = kind
                    if payload is None:
                        payload = {}
                    if task is not None:
                        task.check_payload(payload)
                    job = NewJob(job_type, "", opts.queue, opts.priority, now, opts.max_attempts)
                    if opts.limit is not None:  # its group is read from a checked payload
                        check(payload)
                        job.limit_key = opts.limit.key
                        job.limit_group = opts.limit.group_of(payload)
                    append(job)
                    values.append(payload)
                    if needs is not None:
                        needs.append(None)
                else:
                    options = item_options(item[2])
                    need = needs_of(
                        options.pop("after", None), options.pop("on_upstream_failure", "cancel")
                    )
                    if need is not None and needs is None:
                        needs = [None] * len(jobs)
                    append(self.job(now, item[0], item[1], **options))
                    others.append(n)
                    if needs is not None:
                        needs.append(need)
        except ErrandsError as exc:
            self._encode_pending(jobs, values, others)  # an earlier item's error first
            raise at_item(n, exc) from None
        except TypeError as exc:
            self._encode_pending(jobs, values, others)
            raise type_error_at(n, exc) from None
        self._encode_pending(jobs, values, others)
        return Batch(jobs, now, needs)

    def _encode_pending(self, jobs: list[NewJob], values: list[Any], others: list[int]) -> None:
        """Fill in the payload text of the short path's jobs (``jobs`` but the numbers in
        ``others``): all at once, or, when one of them may break the rule, one by one so
        that the error names its item."""
        if not values:
            return
        numbers: Sequence[int] = range(len(jobs))
        if others:
            skip = set(others)
            numbers = [n for n in numbers if n not in skip]
            jobs = [jobs[n] for n in numbers]
        for job, text in zip(jobs, self._texts(values, numbers), strict=True):
            job.payload = text

    def _texts(self, values: list[Any], numbers: Sequence[int]) -> list[str]:
        """The payloads' texts, in one pass (``payload.encode_checked``), or one by one when
        that pass sees a hint of a bad one, so that the error names its item (``numbers``)."""
        limit = self.max_payload_bytes
        texts = payload_json.encode_checked(values, limit)
        if texts is None:
            texts = []
            for n, value in zip(numbers, values, strict=True):
                try:
                    texts.append(payload_json.encode(value, max_bytes=limit))
                except ErrandsError as exc:
                    raise at_item(n, exc) from None
        return texts

    def _alike(self, items: list[Any], now: float) -> Batch | None:
        """The common ``enqueue_many``, a list of ``(type, payload)`` pairs of one type whose
        task sets no limit, checked with no Python step per item but the task's own payload
        check (if the type has a task): shapes and the type read in C, the payloads checked
        and encoded in one pass, the jobs built by ``map``. None when the call is anything
        else (or the type is refused): the item loop then checks it, naming the item."""
        if not items or set(map(type, items)) != {tuple} or set(map(len, items)) != {2}:
            return None
        job_type = items[0][0]
        if type(job_type) is not str:
            return None
        try:  # count compares with ==: an odd object's own __eq__ may raise
            if list(map(_FIRST, items)).count(job_type) != len(items):
                return None
        except Exception:
            return None
        try:
            task, opts = self.kind(job_type)
        except ErrandsError:
            return None
        values = list(map(_SECOND, items))
        # None: enqueued as {}, item by item (by identity: no payload's __eq__ is called)
        if opts.limit is not None or any(map(is_, values, repeat(None))):
            return None
        if task is not None:
            fits = task.check_payload
            for n, value in enumerate(values):
                try:
                    fits(value)
                except ErrandsError as exc:
                    self._texts(values[:n], range(n))  # an earlier item's error first
                    raise at_item(n, exc) from None
                except TypeError as exc:
                    self._texts(values[:n], range(n))
                    raise type_error_at(n, exc) from None
        texts = self._texts(values, range(len(values)))
        many = len(values)
        jobs = list(
            map(
                NewJob,
                repeat(job_type, many),
                texts,
                repeat(opts.queue, many),
                repeat(opts.priority, many),
                repeat(now, many),
                repeat(opts.max_attempts, many),
            )
        )
        return Batch(jobs, now, None)

    def kind(self, job_type: Any) -> tuple[Task[Any, Any] | None, TaskOptions]:
        """The task a job type names (None for a type another service runs) and the options
        its jobs take by default; raises if the type cannot be enqueued here."""
        if not isinstance(job_type, str) or not job_type:
            raise UnknownTaskError(
                f"job type must be a non-empty string (a task name), got {job_type!r:.60}"
            )
        task = self.tasks.get(job_type)
        if task is not None:
            return task, task.options
        if self.tasks:
            raise UnknownTaskError(
                f"no task named {job_type!r:.80} is registered on this Queue "
                f"(known: {', '.join(sorted(self.tasks))}); register it with @q.task, or enqueue "
                "from a Queue with no tasks registered to send jobs another service runs"
            )
        validate.name(job_type, "job type")
        # A type a worker elsewhere declares: the options it recorded (errands.client.declared).
        declared = self.declared.get(job_type) if self.declared is not None else None
        return None, _NO_TASK_OPTIONS if declared is None else declared

    def job(
        self,
        now: float,
        job_type: str,
        payload: Any,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | float | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
    ) -> NewJob:
        """One job with every option checked, in a fixed order (type, payload, times,
        numbers, names), so the first problem found is always the same one."""
        task, opts = self.kind(job_type)
        if payload is None:
            payload = {}
        if task is not None:
            task.check_payload(payload)
        if run_at is not None and delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if delay is not None:
            when = validate.when(now, delay)
        elif run_at is not None:
            when = validate.epoch(run_at, "run_at")
        else:
            when = now
        prio = (
            opts.priority
            if priority is None
            else validate.integer(priority, "priority", *validate.PRIORITY_RANGE)
        )
        attempts = (
            opts.max_attempts
            if max_attempts is None
            else validate.integer(max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        )
        if unique_key is not None:
            validate.text(unique_key, "unique_key", max_bytes=validate.MAX_KEY_BYTES)
        if queue is not None:
            validate.name(queue, "queue")
        job = NewJob(
            job_type,
            payload_json.encode(payload, max_bytes=self.max_payload_bytes),
            opts.queue if queue is None else queue,
            prio,
            when,
            attempts,
            unique_key,
        )
        if opts.limit is not None:  # the task's limit: its key, and this payload's group
            job.limit_key = opts.limit.key
            job.limit_group = opts.limit.group_of(payload)
        return job

    # -- writing: checks and middleware run the same way for the blocking and the async
    # producers; only the write itself differs.

    def store(self, batch: Batch, actor: str, connection: Any) -> list[int]:
        jobs, now, needs = batch
        if not jobs:
            return []
        if self.refuse is not None:
            self.refuse()
        jobs, after = self._hooked(jobs, actor)
        try:
            if needs is not None:
                # Jobs with dependencies lock their upstreams as they write: never grouped.
                ids = self.backend.enqueue_after(
                    jobs, needs, now, actor=actor, connection=connection
                )
            elif self.group is not None and connection is None:
                ids = self.group.enqueue(jobs, now, actor)
            else:
                ids = self.backend.enqueue(jobs, now, actor=actor, connection=connection)
        except BaseException as exc:
            if after is not None:
                after(None, exc)
            raise
        return self._stored(jobs, ids, now, connection, after)

    async def store_async(self, batch: Batch, actor: str, connection: Any) -> list[int]:
        jobs, now, needs = batch
        if not jobs:
            return []
        if self.refuse is not None:
            self.refuse()
        jobs, after = self._hooked(jobs, actor)
        if needs is None:
            write: Callable[..., list[int]] = self.backend.enqueue
            native = getattr(self.backend, "enqueue_async", None)
        else:
            write = partial(self.backend.enqueue_after, needs=needs)
            native = getattr(self.backend, "enqueue_after_async", None)
            native = None if native is None else partial(native, needs=needs)
        try:
            if native is not None:
                ids: list[int] = await native(jobs, now=now, actor=actor, connection=connection)
            elif connection is not None:
                # SQLite, in the application's transaction: no commit (no fsync) happens here,
                # and its connection belongs to this thread.
                ids = write(jobs, now=now, actor=actor, connection=connection)
            elif self.group is not None and needs is None:
                ids = await self.group.enqueue_async(jobs, now, actor)
            else:
                ids = await self.off_loop(partial(write, jobs, now=now, actor=actor))
        except BaseException as exc:
            if after is not None:
                after(None, exc)
            raise
        return self._stored(jobs, ids, now, connection, after)

    def _hooked(self, jobs: list[NewJob], actor: str) -> tuple[list[NewJob], After]:
        """Run enqueue middleware's before-parts; returns the jobs with the headers they set,
        and what to call after the write (None without middleware)."""
        chain = self.chain()
        if chain is None or not chain.enqueue_hooks:
            return jobs, None
        infos = [
            Enqueuing(
                j.type,
                j.queue,
                json.loads(j.payload),
                j.priority,
                j.run_at,
                j.max_attempts,
                j.unique_key,
                actor,
            )
            for j in jobs
        ]
        around = chain.enqueuing(infos)
        next(around)
        hooked = [replace(j, headers=_headers(info)) for j, info in zip(jobs, infos, strict=True)]

        def after(ids: list[int] | None, error: BaseException | None) -> None:
            for n, info in enumerate(infos):
                info.id, info.error = (None if ids is None else ids[n]), error
            next(around, None)

        return hooked, after

    def _stored(
        self, jobs: list[NewJob], ids: list[int], now: float, connection: Any, after: After
    ) -> list[int]:
        if after is not None:
            after(ids, None)
        if connection is None and min(map(_RUN_AT, jobs)) <= now:  # one due: C, no step per job
            self.wake()
        return ids


def item_options(options: Any) -> dict[str, Any]:
    """An enqueue_many item's options: a mapping of enqueue's keyword arguments."""
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"options must be a dict of enqueue options, got {type(options).__name__}"
        )
    unknown = sorted(str(k) for k in options if k not in ITEM_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)}; use {', '.join(sorted(ITEM_OPTIONS))} "
            "(connection= and actor= go to enqueue_many itself)"
        )
    return dict(options)


def at_item(n: int, exc: ErrandsError) -> ErrandsError:
    """The same error class, its message prefixed with the item's index."""
    try:
        return type(exc)(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc


def type_error_at(n: int, exc: TypeError) -> TypeError:
    """Prefix an item index to a payload error from enqueue_many."""
    cls = exc.__class__
    try:
        return cls(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc


def _headers(info: Enqueuing) -> str | None:
    try:
        return encode_headers(info.headers)
    except TypeError as exc:
        log.error(
            "enqueue middleware set bad job headers (%s); the job is stored without them", exc
        )
        return None
