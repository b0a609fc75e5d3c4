"""What a worker takes from the Queue that runs it — and nothing else of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .backends.base import Backend, Listener
from .maintenance import Service
from .settings import Settings
from .tasks import Task

if TYPE_CHECKING:
    from .middleware import Chain
    from .queue import Queue


@dataclass(frozen=True, slots=True)
class WorkerInputs:
    """Everything a worker uses, and nothing else of the Queue."""

    backend: Backend
    settings: Settings
    clock: Callable[[], float]  # wall time, for what the database stores and compares
    tasks: Mapping[str, Task[Any, Any]]
    services: Sequence[Service]  # maintenance, run by whichever worker leads each
    hooks: Chain | None  # execute middleware; None when there is none (it costs nothing)
    # Calls back when work may have become due: this process's enqueues at once, other
    # processes' through the backend's listener.
    listen: Callable[[Callable[[], None]], Listener]
    # Tells the Queue a worker runs on it (so ``q.close()`` stops it first and never closes
    # connections under it); returns the call that says it has stopped.
    attach: Callable[[LiveWorker], Callable[[], None]] = lambda worker: _nothing

    @classmethod
    def of(cls, q: Queue) -> WorkerInputs:
        return cls(
            backend=q.backend,
            settings=q.settings,
            clock=q.clock,
            tasks=q.tasks,
            services=q.services(),
            hooks=q.execute_hooks,
            listen=q.listen_for_work,
            attach=q.attach_worker,
        )


class LiveWorker(Protocol):
    """What the Queue may ask of a worker running on it."""

    def stop_for_close(self) -> None: ...
    def owns_current_thread(self) -> bool: ...
    def wait_stopped(self, timeout: float) -> bool: ...


def _nothing() -> None:
    return None
