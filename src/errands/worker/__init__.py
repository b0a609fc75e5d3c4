"""The worker: the control loop (``loop``), the executor and one handler's execution, the
outcome recorder, its database calls, log, signals, and the ``--processes`` supervisor.

``errands.worker.Worker`` and ``WorkerSummary`` are the names callers use."""

from .loop import Worker
from .recorder import WorkerSummary

__all__ = ["Worker", "WorkerSummary"]
