"""Maintenance services, one module each, led by the runner: ``rescuer`` (expired leases),
``scheduler`` (periodic schedules), ``pruner`` (retention), ``vacuum`` (PostgreSQL's dead
tuples). Each service has ``name``, ``interval`` and ``run_once(now)`` returning a report;
``runner.Maintenance`` holds each service's leader lease and runs the ones it leads."""

from .pruner import Pruner
from .rescuer import Rescuer
from .runner import Maintenance, Service
from .scheduler import PeriodicScheduler
from .vacuum import Vacuumer

__all__ = ["Maintenance", "PeriodicScheduler", "Pruner", "Rescuer", "Service", "Vacuumer"]
