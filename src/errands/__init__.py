"""errands: a durable, observable job queue — one SQLite file to start, PostgreSQL to grow.

import errands
q = errands.Queue("app.db")

@q.task(max_attempts=5)
def send_email(to: str, subject: str) -> None: ...

send_email.enqueue(to="a@example.com", subject="hi")
q.run_worker(concurrency=8)
"""

from .context import JobContext
from .core.backoff import exponential, fixed, linear
from .core.options import EnqueueOptions
from .core.records import Attempt, EventRecord, Job
from .core.states import AttemptStatus, Event, State
from .errors import (
    ConfigurationError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseReplacedError,
    ErrandsError,
    GraduatedError,
    InvalidTransitionError,
    JobError,
    JobNotFoundError,
    PayloadError,
    PayloadTooLargeError,
    SchemaConflictError,
    SchemaVersionError,
    SignalTimeout,
    Snooze,
    UnknownTaskError,
    WaitTimeout,
)
from .fair import Fair, FairInfo
from .limits import Limit, LimitInfo, QueueInfo
from .middleware import Enqueuing, Execution, Middleware
from .queue import Queue
from .tasks import Task
from .wakeups import Wakeups
from .worker.loop import WorkerSummary

__version__ = "0.1.0"

__all__ = [
    "Attempt",
    "AttemptStatus",
    "ConfigurationError",
    "DatabaseBusyError",
    "DatabaseError",
    "DatabaseReplacedError",
    "EnqueueOptions",
    "Enqueuing",
    "ErrandsError",
    "Event",
    "EventRecord",
    "Execution",
    "Fair",
    "FairInfo",
    "GraduatedError",
    "InvalidTransitionError",
    "Job",
    "JobContext",
    "JobError",
    "JobNotFoundError",
    "Limit",
    "LimitInfo",
    "Middleware",
    "PayloadError",
    "PayloadTooLargeError",
    "Queue",
    "QueueInfo",
    "SchemaConflictError",
    "SchemaVersionError",
    "SignalTimeout",
    "Snooze",
    "State",
    "Task",
    "UnknownTaskError",
    "WaitTimeout",
    "Wakeups",
    "WorkerSummary",
    "__version__",
    "exponential",
    "fixed",
    "linear",
]
