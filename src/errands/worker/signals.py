"""How a worker answers signals (docs/runtime.md, "Signals"). SIGTERM, SIGINT and SIGHUP (a
terminal or ssh session closing): the first asks for a graceful stop (running jobs finish,
unstarted ones are handed back), a second one for a stop at once (leases recover what was
running). Under the supervisor the stop at once is the supervisor's call, so a child takes a
repeated signal as the same request and ignores SIGINT. SIGUSR1 and SIGUSR2, whose default
would kill the worker on the spot, are ignored with a log line — unless the application
installed a handler of its own for them, which is left in place."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

log = logging.getLogger("errands.worker")

# Each asks for a graceful stop; a second one (outside the supervisor) for a stop at once.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Signals whose default action would kill a worker at once, without a word: logged instead.
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


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
        """Take over SIGTERM, SIGINT and SIGHUP, and SIGUSR1/2 if nobody else did (only
        possible on the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started under nohup: the user asked for SIGHUP to be ignored
            # Under the supervisor, Ctrl-C's SIGINT reaches the whole process group: the
            # supervisor turns it into one SIGTERM per child, so a child ignores it.
            handler = signal.SIG_IGN if self.supervised and sig == signal.SIGINT else None
            self._previous[sig] = signal.signal(sig, handler or self._on_signal)
        for sig in IGNORED_SIGNALS:
            # Only where the default (terminate at once) is in force: an application's own
            # handler — or faulthandler's — stays.
            if signal.getsignal(sig) == signal.SIG_DFL:
                self._previous[sig] = signal.signal(sig, self._on_ignored)

    def _on_ignored(self, signum: int, frame: FrameType | None) -> None:
        log.info(
            "%s ignored: it does not stop a worker (SIGTERM, SIGINT or SIGHUP stop it gracefully)",
            signal.Signals(signum).name,
        )

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
