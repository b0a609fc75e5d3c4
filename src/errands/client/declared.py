"""What other processes declared, as a producer sees it: task options a worker recorded, and
whether ``errands graduate`` moved the queue away.

A worker records the options of every task it runs when it starts (``task_types``: queue,
priority, max_attempts, timeout; the latest declaration of a type wins). A Queue with no
tasks registered — a web process enqueueing ``q.enqueue("send_welcome", …)`` for a worker
elsewhere — fills in the options a call leaves out from those records, so its jobs land in
the queue the task names, with its priority and attempts. A type nobody has declared takes
the documented defaults (queue ``default``, priority 0, 20 attempts) and ``errands check``
warns about its queued jobs.

Cost: the producer keeps the whole table in memory and reads it again at most once per
``DeclaredOptions.ttl`` seconds (30 s), on the first enqueue after that, so a change of
options reaches producers within that time of the worker's start; a Queue with tasks of its
own never reads it.

Graduation: a producer reads the mark when its Queue opens, then again at most once per
``TTL`` on enqueue (``GraduationWatch``), so a process that had the queue open before
``errands graduate`` ran refuses new jobs within that time too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..backends.base import Graduation, TaskTypeRow
from ..tasks import TaskOptions

TTL = 30.0  # seconds a producer trusts its copy of task_types


class DeclaredOptions:
    """A producer's cached copy of ``task_types``: ``get(type)`` is the options jobs of that
    type take by default, or None for a type nobody has declared."""

    def __init__(
        self,
        read: Callable[[], list[TaskTypeRow]],
        *,
        ttl: float = TTL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.ttl = ttl
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._options: dict[str, TaskOptions] = {}
        self._read_at: float | None = None

    def get(self, job_type: str) -> TaskOptions | None:
        now = self._monotonic()
        read_at = self._read_at
        if read_at is None or now - read_at >= self.ttl:
            with self._lock:
                if self._read_at is None or now - self._read_at >= self.ttl:
                    self._options = {
                        r.type: TaskOptions(
                            queue=r.queue,
                            priority=r.priority,
                            max_attempts=r.max_attempts,
                            timeout=r.timeout_seconds,
                        )
                        for r in self._read()
                    }
                    self._read_at = now
        return self._options.get(job_type)

    def forget(self) -> None:
        """Read the table again at the next enqueue (``Queue.refresh_task_types``)."""
        with self._lock:
            self._read_at = None


class GraduationWatch:
    """Called before every write of new jobs: raises (through ``refuse``) once the database
    carries a graduation mark, reading the mark at most once per ``ttl`` seconds."""

    def __init__(
        self,
        read: Callable[[], Graduation | None],
        refuse: Callable[[Graduation], None],
        *,
        initial: Graduation | None,
        ttl: float = TTL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refuse = refuse
        self._mark = initial
        self.ttl = ttl
        self._monotonic = monotonic
        self._read_at = monotonic()

    def __call__(self) -> None:
        now = self._monotonic()
        if now - self._read_at >= self.ttl:
            self._mark = self._read()
            self._read_at = now
        if self._mark is not None:
            self._refuse(self._mark)
