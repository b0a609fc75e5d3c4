"""PostgreSQL's wake-up path: a dedicated connection LISTENing on a channel, in a thread of
its own, so that an enqueue (or a job finishing) reaches an idle worker or waiter at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

log = logging.getLogger("errands.postgres")


class NotifyListener:
    """A dedicated connection LISTENing on one channel, in a thread; ``on_change`` gets each
    notification's payload. After a drop it reconnects (with backoff) and signals once with
    None, since a NOTIFY sent while it was away is lost; meanwhile the worker's poll_interval
    still finds the work."""

    WAIT = 0.25  # how often the thread checks whether to stop
    MAX_BACKOFF = 2.0

    def __init__(
        self,
        url: str,
        where: str,
        on_change: Callable[[str | None], None],
        channel: str,
    ) -> None:
        self._url = url
        self._where = where
        self._on_change = on_change
        self._channel = channel
        self._stop = threading.Event()
        self.connected = threading.Event()
        self.reconnects = 0
        self._thread = threading.Thread(target=self._run, name="errands-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.05
        first = True
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name="errands-listener",
                ) as conn:
                    conn.execute(f"LISTEN {self._channel}")
                    self.connected.set()
                    if not first:
                        self.reconnects += 1
                        self._on_change(None)
                    first, backoff = False, 0.05
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=self.WAIT):
                            self._on_change(note.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning(
                    "LISTEN connection to %s lost (%s); reconnecting in %.2fs, polling meanwhile",
                    self._where,
                    exc,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.MAX_BACKOFF)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.WAIT * 4 + 5)
