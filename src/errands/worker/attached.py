"""What a Worker's Queue may ask of it (``inputs.LiveWorker``): ``Queue.close()`` stops the
workers running on it before it closes anything, and must know whether it is called from
inside one (a handler's ``q.close()``: it cannot wait for the worker, which waits for that
handler) — then the worker performs the close itself once it has stopped (docs/runtime.md,
"The application's own process"). Also the watch on a supervised worker's parent."""

from __future__ import annotations

import logging
import os
import threading

from .executor import Executor
from .inputs import WorkerInputs
from .recorder import WorkerSummary
from .signals import Stop

log = logging.getLogger("errands.worker")


class Attached:
    """The Worker's side of its Queue (a mixin: the Worker defines what is declared here)."""

    inputs: WorkerInputs
    summary: WorkerSummary
    executor: Executor
    _stop: Stop
    _control: threading.Thread | None  # the thread in run()
    _stopped: threading.Event  # run() has returned
    _parent: int | None  # under the supervisor: its pid

    def stop(self) -> None: ...

    def _run(self) -> None: ...

    def run(self) -> WorkerSummary:
        self._control = threading.current_thread()
        detach = self.inputs.attach(self)
        try:
            self._run()
        finally:
            try:
                detach()  # performs a Queue.close() asked for while this worker ran
            finally:
                self._stopped.set()
        return self.summary

    def stop_for_close(self) -> None:
        """The application closed the Queue this worker runs on: stop gracefully; the Queue
        closes its connections once this worker has stopped."""
        if not self.summary.queue_closed:
            self.summary.queue_closed = True
            inside = self.owns_current_thread()
            log.log(
                logging.WARNING if inside else logging.INFO,
                "the Queue was closed while this worker runs (%s): stopping gracefully — "
                "running jobs finish, prefetched ones are handed back — and the Queue closes "
                "once the worker has stopped",
                "q.close() or `with q:` in a handler" if inside else "the application shuts down",
            )
        self.stop()

    def owns_current_thread(self) -> bool:
        """Whether the calling thread is this worker's control thread or one running its
        handlers (so it must not wait for the worker to stop)."""
        return threading.current_thread() is self._control or self.executor.owns_current_thread()

    def wait_stopped(self, timeout: float) -> bool:
        return self._stopped.wait(timeout)

    def _check_parent(self) -> None:
        """A supervised worker whose supervisor died works on unsupervised: stop. The kernel
        normally says so with SIGTERM (supervisor.py); this covers where it cannot."""
        if self._parent is not None and os.getppid() != self._parent:
            log.warning("the supervisor (pid %d) is gone: stopping gracefully", self._parent)
            self._parent = None
            self._stop.graceful = True
