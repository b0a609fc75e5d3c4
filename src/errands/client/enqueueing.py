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
from functools import partial
from itertools import repeat
from operator import attrgetter, is_, itemgetter
from typing import Any, NamedTuple, TypeVar

from ..backends.base import Audit, Needs, NewJob
from ..backends.verbs import Backend
from ..core import payload as payload_json
from ..core import validate
from ..core.options import DEFAULT, EnqueueKwargs, EnqueueOptions
from ..errors import ConfigurationError, ErrandsError, PayloadError, UnknownTaskError, at_item
from ..middleware import Chain, Enqueuing, encode_headers
from ..tasks import Task, TaskOptions
from .declared import DeclaredOptions
from .grouping import GroupCommitter

log = logging.getLogger("errands")
R = TypeVar("R")

EnqueueItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any] | EnqueueOptions]
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


def needs_of(options: EnqueueOptions) -> Needs | None:
    """What a job enqueued with these options waits for (None: nothing)."""
    ids = options.after
    return None if ids is None else Needs(tuple(ids), (), options.on_upstream_failure)


class Kind(NamedTuple):
    """What a job type means in one enqueue call: its task (None for a type another service
    runs) and the options its jobs take by default, which build them (``TaskOptions.job``)."""

    task: Task[Any, Any] | None
    defaults: TaskOptions

    def check(self, payload: Any) -> None:
        if self.task is not None:
            self.task.check_payload(payload)


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

    def one(self, job_type: str, payload: Any, options: EnqueueOptions = DEFAULT) -> Batch:
        """One ``enqueue`` call's job, checked (``options`` were checked when built)."""
        now = self.clock()
        job = self.job(now, job_type, payload, options)
        return Batch([job], now, None if options.after is None else [needs_of(options)])

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
        kinds: dict[str, Kind] = {}
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
                    if payload is None:
                        payload = {}
                    kind.check(payload)
                    append(
                        kind.defaults.job(job_type, "", payload, now)
                    )  # its text: _encode_pending
                    values.append(payload)
                    if needs is not None:
                        needs.append(None)
                else:
                    options = item_options(item[2])
                    need = needs_of(options)
                    if need is not None and needs is None:
                        needs = [None] * len(jobs)
                    append(self.job(now, item[0], item[1], options))
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
        """The common ``enqueue_many``, a list of ``(type, payload)`` pairs of one type,
        checked with no Python step per item but the task's own payload check (if the type
        has a task) and its limit's group (if it sets one): shapes and the type read in C,
        the payloads checked and encoded in one pass, the jobs built by ``Kind.jobs``. None
        when the call is anything else (or the type is refused): the item loop then checks
        it, naming the item."""
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
            kind = self.kind(job_type)
        except ErrandsError:
            return None
        values = list(map(_SECOND, items))
        # None: enqueued as {}, item by item (by identity: no payload's __eq__ is called)
        if any(map(is_, values, repeat(None))):
            return None
        if kind.task is not None:
            fits = kind.task.check_payload
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
        return Batch(kind.defaults.jobs(job_type, texts, values, now), now, None)

    def kind(self, job_type: Any) -> Kind:
        """The task a job type names (None for a type another service runs) and the options
        its jobs take by default; raises if the type cannot be enqueued here."""
        if not isinstance(job_type, str) or not job_type:
            raise UnknownTaskError(
                f"job type must be a non-empty string (a task name), got {job_type!r:.60}"
            )
        task = self.tasks.get(job_type)
        if task is not None:
            return Kind(task, task.options)
        if self.tasks:
            raise UnknownTaskError(
                f"no task named {job_type!r:.80} is registered on this Queue "
                f"(known: {', '.join(sorted(self.tasks))}); register it with @q.task, or enqueue "
                "from a Queue with no tasks registered to send jobs another service runs"
            )
        validate.name(job_type, "job type")
        # A type a worker elsewhere declares: the options it recorded (errands.client.declared).
        declared = self.declared.get(job_type) if self.declared is not None else None
        return Kind(None, _NO_TASK_OPTIONS if declared is None else declared)

    def job(
        self, now: float, job_type: str, payload: Any, options: EnqueueOptions = DEFAULT
    ) -> NewJob:
        """One job checked in a fixed order (type, payload; its options were checked when
        built), so the first problem found is always the same one, and built by its Kind."""
        kind = self.kind(job_type)
        if payload is None:
            payload = {}
        kind.check(payload)
        text = payload_json.encode(payload, max_bytes=self.max_payload_bytes)
        return kind.defaults.job(job_type, text, payload, now, options)

    # -- writing: checks and middleware run the same way for the blocking and the async
    # producers; only the write itself differs.

    def store(
        self, batch: Batch, actor: str, connection: Any, audit: Audit | None = None
    ) -> list[int]:
        """Write the checked jobs; ``audit``: the activity row of an enqueue by hand, in the
        same transaction (so never a shared group commit's)."""
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
                    jobs, needs, now, actor=actor, connection=connection, audit=audit
                )
            elif self.group is not None and connection is None and audit is None:
                ids = self.group.enqueue(jobs, now, actor)
            else:
                ids = self.backend.enqueue(
                    jobs, now, actor=actor, connection=connection, audit=audit
                )
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


def call_options(options: EnqueueOptions | None, kwargs: EnqueueKwargs) -> EnqueueOptions:
    """One enqueue call's options as the one value: ``options=``, its fields replaced by the
    keyword arguments given (each checked once, here)."""
    if options is None:
        return EnqueueOptions.of(kwargs) if kwargs else DEFAULT
    if not isinstance(options, EnqueueOptions):
        raise ConfigurationError(
            f"options= takes an errands.EnqueueOptions, got {type(options).__name__}; or pass "
            "the options as keyword arguments"
        )
    return options.merged(kwargs)


def item_options(options: Any) -> EnqueueOptions:
    """An enqueue_many item's options: an ``errands.EnqueueOptions``, or a dict of enqueue's
    keyword arguments."""
    if isinstance(options, EnqueueOptions):
        return options
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            "options must be a dict of enqueue options or an errands.EnqueueOptions, got "
            f"{type(options).__name__}"
        )
    where = "an enqueue_many item (connection= and actor= go to enqueue_many itself)"
    return EnqueueOptions.of(options, where)


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
