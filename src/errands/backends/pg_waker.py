"""PostgreSQL's coalesced wake-up: one NOTIFY sent after a burst of concurrent enqueues, instead
of one inside each of their transactions.

Why: PostgreSQL commits notifying transactions one at a time — a transaction that has queued a
NOTIFY takes a database-wide lock just before its commit and holds it until the commit record
is flushed — so producers that each NOTIFY cannot share a WAL flush, and 8 threads enqueueing
due jobs ran at ~0.6 times the rate of the same threads enqueueing jobs due later (BENCHMARKS.md,
#26). A producer that finds another enqueue of this process in flight leaves the NOTIFY out of
its transaction and, once its call has returned from the server, pokes the ``Waker``; the
Waker's thread sends one NOTIFY on a connection of its own for every poke that came in while
it was idle or busy with the previous one. A lone producer keeps the NOTIFY in its own
statement (PostgresBackend.enqueue): it never waits for company, and its pickup latency is
what it was.

Every committed due job is still followed by a NOTIFY: the poke comes after the commit, and a
poke that arrives while a NOTIFY is on its way sets the flag again, so another NOTIFY follows.
A wake-up means "look again" (wakeups.py), so a spurious one costs a claim that finds nothing.

The Waker's connection commits its NOTIFY with ``synchronous_commit = off``: a notification
needs no durability (a listener reads it once the transaction is committed in memory), so it
does not wait for a WAL flush while holding that lock. If the connection breaks, the Waker
reconnects on the next poke; meanwhile workers still find the work by their poll_interval,
as after any lost notification.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from . import forks
from .pg_connection import describe, first_line

log = logging.getLogger("errands.postgres")

_NOTIFY = "SELECT pg_notify(%s, '')"  # the channel is the Queue's (its table prefix's)

# Wakers inherited through os.fork(): kept referenced, never used nor closed in the child (their
# thread is not running there and their session is the parent's).
_INHERITED: list[Waker] = []


class Producers:
    """A backend's one-by-one producers in this process: how many are in flight, and the
    Waker that sends the NOTIFY those that overlap leave out (made on first need)."""

    def __init__(self, make_waker: Callable[[], Waker]) -> None:
        self._make_waker = make_waker
        self._lock = threading.Lock()
        self._in_flight = 0
        self._generation = forks.generation
        self.waker: Waker | None = None

    @contextlib.contextmanager
    def one(self, due: bool) -> Iterator[bool]:
        """Around a one-by-one enqueue in a transaction of its own: yields whether its
        statement sends the wake-up NOTIFY itself. A lone producer does (no one to share it
        with, no latency added); one that finds another enqueue of this process in flight
        leaves it to the Waker, poked once the call is over — after the commit, so the NOTIFY
        that follows finds the job. Poked on a failure too: a spurious wake-up costs an idle
        worker one empty claim, a lost one a poll_interval."""
        if self._generation != forks.generation:
            # A forked child: the parent's count (and a lock another thread may have held at
            # the fork) are not this process's.
            self._lock = threading.Lock()
            self._in_flight, self._generation = 0, forks.generation
        with self._lock:
            alone = self._in_flight == 0
            self._in_flight += 1
        try:
            yield due and alone
        finally:
            with self._lock:
                self._in_flight -= 1
            if due and not alone:
                self.waker_here().poke()

    def waker_here(self) -> Waker:
        """This process's Waker (a forked child makes its own)."""
        waker = self.waker
        if waker is None or waker.generation != forks.generation:
            with self._lock:
                waker = self.waker
                if waker is None or waker.generation != forks.generation:
                    if waker is not None:
                        _INHERITED.append(waker)
                    waker = self.waker = self._make_waker()
        return waker

    def close(self) -> None:
        """Close this process's Waker (a NOTIFY still owed is sent first)."""
        waker, self.waker = self.waker, None
        if waker is not None and waker.generation == forks.generation:
            waker.close()


class Waker:
    """A thread that sends ``SELECT pg_notify(channel, '')`` once per burst of ``poke()``s.

    Started on the first poke; ``close()`` sends a NOTIFY still owed, then stops the thread and
    closes its connection. Belongs to the process that made it: after ``os.fork()`` the child
    must make its own (Producers.waker_here), as its thread does not exist there."""

    RETRY_DELAY = 0.05  # after a failed NOTIFY, before the one retry of that burst
    CLOSE_TIMEOUT = 5.0  # how long close() waits for a NOTIFY still owed to go out

    def __init__(self, url: str, conn_kwargs: dict[str, Any], channel: str) -> None:
        self._url = url
        self._conn_kwargs = conn_kwargs
        self._channel = channel
        self._cond = threading.Condition()
        self._owed = False  # a poke has come in since the last NOTIFY started
        self._closed = False
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.generation = forks.generation
        self.sent = 0  # NOTIFYs sent (the tests read it)

    def poke(self) -> bool:
        """Ask for a NOTIFY after this moment; never waits for it. False once closed (the
        Queue is closing: its workers' poll_interval finds what was committed last)."""
        with self._cond:
            if self._closed:
                return False
            self._owed = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="errands-waker", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
            return True

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.CLOSE_TIMEOUT)
        if thread is None or not thread.is_alive():
            self._drop()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._owed and not self._closed:
                    self._cond.wait()
                if not self._owed:  # closed with nothing owed
                    break
                self._owed = False
            self._send()
        self._drop()

    def _send(self) -> None:
        # Two tries: a server restart or pg_terminate_backend leaves a dead connection that
        # only the first use finds; the second try reconnects. Past that, the workers'
        # poll_interval finds the jobs, as after any lost notification.
        # Any exception, not only the driver's: the thread must outlive a surprise, or every
        # later poke would wait for a NOTIFY that nobody sends.
        for attempt in (1, 2):
            try:
                conn = self._connect()
                conn.execute(_NOTIFY, (self._channel,))
                self.sent += 1
                return
            except Exception as exc:
                self._drop()
                if attempt == 2:
                    log.warning(
                        "errands: could not send the wake-up NOTIFY to %s (%s); idle workers "
                        "will find the new jobs by their poll_interval",
                        describe(self._url),
                        first_line(exc),
                    )
                    return
                time.sleep(self.RETRY_DELAY)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            # Named apart from the pool's sessions, as the listener's are (pg_stat_activity).
            kwargs = {**self._conn_kwargs, "application_name": "errands-waker"}
            conn = psycopg.connect(self._url, connect_timeout=10, **kwargs)
            conn.execute("SET synchronous_commit = off")
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
