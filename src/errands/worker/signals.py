"""How a worker answers SIGTERM and SIGINT: the first asks for a graceful stop (running jobs
finish, unstarted ones are handed back), a second one for a stop at once (leases recover what
was running). Under the supervisor the stop at once is the supervisor's call, so a child takes
a repeated signal as the same request and ignores SIGINT (docs/runtime.md, "Graceful
shutdown")."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

log = logging.getLogger("errands.worker")


@dataclass(slots=True)
class Stop:
    """A worker's stop flags: set by ``Worker.stop()``, the signal handlers and the control
    loop itself (recycling, a vanished database); read at every step."""

    graceful: bool = False  # finish running jobs, hand back the rest, then stop
    now: bool = False  # stop without waiting for running jobs


class SignalHandlers:
    def __init__(self, stop: Stop, *, supervised: bool) -> None:
        self.stop = stop
        self.supervised = supervised
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Take over SIGTERM and SIGINT (only possible on the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Under the supervisor, Ctrl-C's SIGINT reaches the whole process group: the
            # supervisor turns it into one SIGTERM per child, so a child ignores it.
            handler = signal.SIG_IGN if self.supervised and sig == signal.SIGINT else None
            self._previous[sig] = signal.signal(sig, handler or self._on_signal)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        stop = self.stop
        if stop.graceful and self.supervised:
            # The same stop can arrive twice (a signal to the whole process group or cgroup,
            # and the supervisor passing it on): stopping at once is the supervisor's call,
            # made on a second signal *it* receives.
            log.info("%s again: already stopping gracefully", signal.Signals(signum).name)
            return
        if stop.graceful:
            log.warning(
                "second %s: stopping now; leases will recover running jobs",
                signal.Signals(signum).name,
            )
            stop.now = True
        else:
            log.info("%s: finishing running jobs, then stopping", signal.Signals(signum).name)
            stop.graceful = True
        # No wake-up Event.set() here: the handler runs on the main thread between bytecodes,
        # possibly while that thread holds the Event's (non-reentrant) lock inside its
        # wait(), and set() would deadlock every thread. Only flags are set; the control
        # loop waits at most 1 s (50 ms during shutdown), so it sees them promptly.
