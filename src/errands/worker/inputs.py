"""What a worker takes from the Queue that runs it — and nothing else of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..backends.verbs import Backend, Listener
from ..core.settings import Settings
from ..maintenance.runner import Service
from ..tasks import Task

if TYPE_CHECKING:
    from ..middleware import Chain


class WorkerSource(Protocol):
    """What ``WorkerInputs.of`` reads of the object that runs a worker (``errands.Queue``):
    typed here so that the worker never imports the Queue."""

    @property
    def backend(self) -> Backend: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...
    @property
    def schedules(self) -> Mapping[str, Any]: ...
    @property
    def _execute_hooks(self) -> Chain | None: ...
    def services(self) -> list[Service]: ...
    def _listen_for_work(self, on_change: Callable[[], None]) -> Listener: ...
    def _attach_worker(self, worker: LiveWorker) -> Callable[[], None]: ...


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
    # The periodic schedules this process declares (recorded on its registry row, so a
    # schedule no live worker declares reads "retired").
    schedules: Sequence[str] = ()
    # Tells the Queue a worker runs on it (so ``q.close()`` stops it first and never closes
    # connections under it); returns the call that says it has stopped.
    attach: Callable[[LiveWorker], Callable[[], None]] = lambda worker: _nothing

    @classmethod
    def of(cls, q: WorkerSource) -> WorkerInputs:
        return cls(
            backend=q.backend,
            settings=q.settings,
            clock=q.clock,
            tasks=q.tasks,
            services=q.services(),
            hooks=q._execute_hooks,
            listen=q._listen_for_work,
            schedules=sorted(q.schedules),
            attach=q._attach_worker,
        )


class LiveWorker(Protocol):
    """What the Queue may ask of a worker running on it."""

    def stop_for_close(self) -> None: ...
    def owns_current_thread(self) -> bool: ...
    def wait_stopped(self, timeout: float) -> bool: ...


def _nothing() -> None:
    return None
