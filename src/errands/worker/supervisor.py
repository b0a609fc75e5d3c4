"""``errands worker --processes P``: run P worker processes and keep them running.

Children are started fresh (``python -m errands worker …``), never forked from a process
holding an open database connection. A child that dies is restarted with backoff; SIGTERM,
SIGINT or SIGHUP is passed on so each child shuts down gracefully; a second signal kills them
all (their leases recover whatever was running).

A signal often reaches the children directly too: Ctrl-C sends SIGINT to the terminal's whole
process group, ``kill -TERM -PGID`` and systemd (KillMode=control-group) signal every process.
So children start with SIGINT ignored (the supervisor forwards it as SIGTERM) and take a
repeated SIGTERM as the same request, never as "stop now": only a second signal to the
supervisor means that (docs/runtime.md, "Graceful shutdown"). A supervisor killed outright
(SIGKILL, the OOM killer) cannot pass anything on: each child asked the kernel for a SIGTERM
when its parent dies (PR_SET_PDEATHSIG), and watches its parent pid besides.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .signals import IGNORED_SIGNALS, STOP_SIGNALS

log = logging.getLogger("errands.supervisor")

RESTART_BACKOFF_MAX = 30.0
# A child exits with this after a sync handler overran its timeout (a thread cannot be
# killed, a process can): it is replaced at once, not counted as a crash.
RECYCLE_EXIT = 75
# A child exits with this when restarting it cannot help (its SQLite file was deleted or
# replaced): the supervisor stops every child and exits 1 instead of restarting it on a fresh,
# empty file created where the old one was.
FATAL_EXIT = 78
SUPERVISED_ENV = "ERRANDS_SUPERVISED"
HEALTHY_AFTER = 60.0  # a child that ran this long restarts with no delay


@dataclass
class _Child:
    slot: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float = 0.0
    done: bool = False


class Supervisor:
    def __init__(
        self,
        child_args: Sequence[str],
        processes: int,
        shutdown_timeout: float,
        *,
        burst: bool = False,
    ) -> None:
        self.child_args = list(child_args)
        self.burst = burst  # children exit 0 when drained: done, not restarted
        self.children = [_Child(i) for i in range(processes)]
        self.shutdown_timeout = shutdown_timeout
        self._stopping = False
        self._kill = False
        self._fatal = False
        self.restarts = 0

    def _start(self, child: _Child) -> None:
        me = os.getpid()
        child.proc = subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", *self.child_args],
            env={**os.environ, SUPERVISED_ENV: "1"},
            preexec_fn=lambda: _child_setup(me),
        )
        child.started = time.monotonic()
        log.info("worker process %d started (pid %d)", child.slot, child.proc.pid)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping:
            self._kill = True
        self._stopping = True
        # Nothing else here (no logging, no locks): the main loop acts on the flags.

    def run(self) -> int:
        previous = {
            s: signal.signal(s, self._on_signal)
            for s in STOP_SIGNALS
            # Under nohup SIGHUP stays ignored, as the user asked.
            if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN)
        }
        # Their default would kill the supervisor and orphan its children: ignored, as the
        # children do (docs/runtime.md, "Signals").
        previous.update({s: signal.signal(s, signal.SIG_IGN) for s in IGNORED_SIGNALS})
        try:
            for child in self.children:
                self._start(child)
            while not self._stopping:
                self._reap_and_restart()
                if self.burst and all(c.done for c in self.children):
                    return 0
                time.sleep(0.1)
            return self._stop_all()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                code = child.proc.returncode
                if self.burst and code == 0:
                    child.done, child.proc = True, None
                    continue
                if code == FATAL_EXIT:
                    log.error(
                        "worker process %d stopped for good (its database file is gone): "
                        "stopping every worker process",
                        child.slot,
                    )
                    child.done, child.proc = True, None
                    self._stopping = self._fatal = True
                    continue
                if code == RECYCLE_EXIT:
                    log.info(
                        "worker process %d recycled (a sync handler overran its timeout)",
                        child.slot,
                    )
                    child.proc, child.restart_at = None, now
                    self.restarts += 1
                    self._start(child)
                    continue
                ran = now - child.started
                child.failures = 0 if ran >= HEALTHY_AFTER else child.failures + 1
                delay = min(RESTART_BACKOFF_MAX, 0.5 * 2 ** max(0, child.failures - 1))
                child.restart_at = now + (0 if child.failures == 0 else delay)
                log.warning(
                    "worker process %d (pid %d) exited with %s after %.1fs; restarting in %.1fs",
                    child.slot,
                    child.proc.pid,
                    code,
                    ran,
                    child.restart_at - now,
                )
                child.proc = None
            if (
                child.proc is None
                and not child.done
                and now >= child.restart_at
                and not self._stopping
            ):
                self.restarts += 1
                self._start(child)

    def _stop_all(self) -> int:
        live = [c.proc for c in self.children if c.proc is not None]
        log.info(
            "stopping %d worker process(es) gracefully; a second signal stops them at once",
            len(live),
        )
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout + 5
        while any(p.poll() is None for p in live):
            if self._kill or time.monotonic() > deadline:
                for p in live:
                    if p.poll() is None:
                        p.kill()
                break
            time.sleep(0.05)
        for p in live:
            p.wait()
        # -SIGTERM: a child still starting up (no handler installed yet) had nothing running.
        clean = all(p.returncode in (0, -signal.SIGTERM) for p in live)
        return 0 if clean and not self._kill and not self._fatal else 1


def _child_setup(supervisor: int) -> None:
    """Run in each child between fork and exec. SIGINT is ignored from the first
    instruction, not only once the worker installs its handlers: a Ctrl-C during the child's
    start-up must not kill it mid-import. And the child asks the kernel for SIGTERM when its
    supervisor dies (even by SIGKILL), so it stops gracefully instead of working on
    unsupervised; the worker also watches its parent pid in case this is unavailable."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != supervisor:  # died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _load_prctl() -> Any:
    """libc's prctl, loaded here in the parent: nothing is loaded between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (the worker's startup cleanup
    recovers the jobs of its host's workers whose process is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
