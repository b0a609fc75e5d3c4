"""Subscriptions to a Queue's wake-ups: what ``Queue.wait`` sleeps on.

``q.subscribe_wakeups("finished")`` wakes when jobs reach a final state; ``"enqueued"`` when
work may have become due. Underneath is each backend's wake-up mechanism (PostgreSQL
LISTEN/NOTIFY; on SQLite the same listener workers use), shared by every subscriber of a Queue
and started on first use, so callers never depend on which mechanism it is and it can change.
A wake-up means "look again": it may be spurious, and a caller still re-reads what it waits for
(and keeps a fallback poll, as workers do, should a notification be lost).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends.verbs import Backend, Listener

KINDS = ("finished", "enqueued")
READY_TIMEOUT = 5.0  # how long the first subscriber waits for the listener to be listening


class Wakeups:
    """One subscriber's view: ``wait(timeout)`` returns True once a wake-up arrived since the
    previous call (or since subscribing), False after ``timeout`` seconds without one.
    Use as a context manager, or ``close()`` it."""

    def __init__(self, hub: _Hub, job_ids: Iterable[int] | None) -> None:
        self._hub = hub
        self._ids = None if job_ids is None else frozenset(job_ids)
        self._flag = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lock = threading.Lock()

    def _notify(self, ids: frozenset[int] | None) -> None:
        if ids is not None and self._ids is not None and not (ids & self._ids):
            return  # the notification names other jobs
        self._flag.set()
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a wake-up arrives (``True``) or ``timeout`` seconds pass (``False``)."""
        got = self._flag.wait(timeout)
        self._flag.clear()
        return got

    async def wait_async(self, timeout: float | None = None) -> bool:
        """As ``wait``, without blocking the event loop."""
        if self._flag.is_set():
            self._flag.clear()
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiters.append((loop, fut))
        if self._flag.is_set():  # arrived between the check and the registration
            _resolve(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if (loop, fut) in self._waiters:
                    self._waiters.remove((loop, fut))
        self._flag.clear()
        return True

    def close(self) -> None:
        """Stop receiving wake-ups; also on leaving a ``with`` block."""
        self._hub.remove(self)

    def __enter__(self) -> Wakeups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Hub:
    """Fans one backend listener out to a Queue's subscribers of one kind."""

    def __init__(self, start: Callable[[Callable[[frozenset[int] | None], None]], Listener]):
        self._start = start
        self._subscribers: set[Wakeups] = set()
        self._listener: Listener | None = None
        self._lock = threading.Lock()

    def add(self, job_ids: Iterable[int] | None) -> Wakeups:
        sub = Wakeups(self, job_ids)
        with self._lock:
            self._subscribers.add(sub)
            if self._listener is None:
                # Kept until the Queue closes: a producer that waits once will likely wait
                # again, and (re)connecting a listener costs more than an idle one.
                self._listener = self._start(self._fire)
                ready: Any = getattr(self._listener, "connected", None)
                if ready is not None:
                    # Subscribing must not miss a wake-up that happens right after it.
                    ready.wait(READY_TIMEOUT)
        return sub

    def remove(self, sub: Wakeups) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def _fire(self, ids: frozenset[int] | None) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub._notify(ids)

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            self._subscribers.clear()
        if listener is not None:
            listener.close()


def hubs(backend: Backend, wakers: set[Callable[[], None]]) -> dict[str, _Hub]:
    """One hub per kind for a Queue. ``enqueued`` also hears this process's own enqueues at
    once (the Queue's in-process wakers), as workers do."""

    def start_enqueued(fire: Callable[[frozenset[int] | None], None]) -> Listener:
        return listen_for_work(backend, wakers, lambda: fire(None))

    return {"finished": _Hub(backend.listen_finished), "enqueued": _Hub(start_enqueued)}


def listen_for_work(
    backend: Backend, wakers: set[Callable[[], None]], on_change: Callable[[], None]
) -> Listener:
    """Call ``on_change`` when work may have become due: at once for this process's own
    enqueues (``wakers``, the Queue's), through the backend's listener for other processes'.
    Closing the result stops both."""
    wakers.add(on_change)
    return _Both(backend.listen(on_change), lambda: wakers.discard(on_change))


class _Both:
    def __init__(self, listener: Listener, also: Callable[[], None]) -> None:
        self._listener = listener
        self._also = also
        self.connected = getattr(listener, "connected", None)

    def close(self) -> None:
        self._also()
        self._listener.close()
