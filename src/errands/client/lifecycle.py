"""Closing a Queue safely, as a mixin ``errands.Queue`` inherits: a worker running on it is
stopped first (and the close deferred until it has), connections are never closed under a
thread using them, and a forked child closes nothing of its parent's (issue #20)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Self

from ..backends import forks
from ..backends.verbs import Backend
from ..core.settings import Settings

if TYPE_CHECKING:
    from ..wakeups import _Hub
    from ..worker.inputs import LiveWorker


class Lifecycle:
    """``close``/``aclose``, the context managers, and the workers attached to the Queue."""

    backend: Backend
    settings: Settings
    _generation: int
    _lock: threading.Lock
    _workers: list[LiveWorker]
    _close_pending: bool
    _hubs: Mapping[str, _Hub]
    _offload: ThreadPoolExecutor | None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def close(self) -> None:
        """Close the database connections, listeners and any async pool.

        A worker running on this Queue is stopped gracefully first (its running jobs finish,
        prefetched ones are handed back): called from another thread, ``close`` waits for it
        (up to ``shutdown_timeout`` + 5 s); called from inside the worker (a handler's
        ``q.close()`` or ``with q:``), it returns at once and the Queue closes when the
        worker has stopped. Connections are never closed under a thread using them. In a
        process forked from the one that opened the Queue, ``close`` closes nothing: the
        connections and listeners are the parent's."""
        if forks.generation != self._generation:
            return
        with self._lock:
            workers = list(self._workers)
        if workers:
            for worker in workers:
                worker.stop_for_close()
            if not any(w.owns_current_thread() for w in workers):
                grace = self.settings.shutdown_timeout + 5.0
                for worker in workers:
                    worker.wait_stopped(grace)
            with self._lock:
                if self._workers:
                    self._close_pending = True
                    return
        self._close_now()

    def _attach_worker(self, worker: LiveWorker) -> Callable[[], None]:
        """A worker starts on this Queue; returns what it calls once stopped (which performs
        a close asked for meanwhile)."""
        with self._lock:
            self._workers.append(worker)

        def detach() -> None:
            with self._lock:
                self._workers.remove(worker)
                close = self._close_pending and not self._workers
                if close:
                    self._close_pending = False
            if close:
                self._close_now()

        return detach

    def _close_now(self) -> None:
        for hub in self._hubs.values():
            hub.close()
        with self._lock:
            offload, self._offload = self._offload, None
        if offload is not None:
            offload.shutdown(wait=True)
        self.backend.close()

    async def aclose(self) -> None:
        """``close()`` from async code: closes the async pool on this event loop, then the
        rest without blocking the loop. In an async handler of a worker running on this
        Queue it only asks that worker to stop, as ``close()`` does there (awaiting the
        worker's stop from inside it would hold the handler until the shutdown timeout)."""
        with self._lock:
            inside = any(w.owns_current_thread() for w in self._workers)
        if inside:
            self.close()
            return
        aclose = getattr(self.backend, "aclose", None)
        if aclose is not None:
            await aclose()
        await asyncio.to_thread(self.close)
