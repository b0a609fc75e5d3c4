"""Enqueue options as one value: ``errands.EnqueueOptions``.

Every way a job is enqueued — ``Queue.enqueue`` and ``enqueue_async``, ``Task.enqueue`` and
``with_options``, an ``enqueue_many`` item's options, ``errands enqueue``, ``POST
/api/admin/jobs`` — builds this one frozen value, checked once when it is built, and the
producer resolves it against the task's defaults into the stored row (client/enqueueing.py).
A new option is a field here (and in ``EnqueueKwargs``, which a test keeps equal), its check
in ``__post_init__``, and its use where the job is built: no other place spells the options
out (docs/architecture.md, "where a change goes").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any, TypedDict

from ..errors import ConfigurationError
from . import validate


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """How one job is enqueued; None leaves the task's default (its ``@q.task`` options, or
    the options a worker declared for a type this process has no task for).

    ``queue``, ``priority`` (higher first), ``run_at`` (an aware datetime or unix seconds) or
    ``delay`` (seconds or a timedelta, from the enqueue), ``max_attempts``, ``unique_key`` (an
    active job holding it is returned instead), ``after`` (job ids this one waits for) and
    ``on_upstream_failure`` (``"cancel"`` or ``"run"``: docs/pipelines.md). The time rules
    (docs/flow-control.md): ``unique_for`` (seconds or a timedelta, with ``unique_key``: once
    the job succeeded its key stays taken that long); ``debounce`` (seconds, with
    ``unique_key``: one queued job per key, the last payload wins, run ``debounce`` after the
    latest enqueue) and ``max_wait`` (but never later than this after the first);
    ``expires_in`` (not started this long after it is due: cancelled); ``deadline`` (seconds
    or a timedelta from its creation: no attempt starts after it, the job fails). Checked
    when built: a mistake shows where the options are written, not at a later enqueue."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | float | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    after: Sequence[int] | None = None
    on_upstream_failure: str = "cancel"
    unique_for: float | timedelta | None = None
    debounce: float | timedelta | None = None
    max_wait: float | timedelta | None = None
    expires_in: float | timedelta | None = None
    deadline: float | timedelta | None = None

    def __post_init__(self) -> None:
        # A fixed order (times, numbers, names, dependencies): the first problem found is
        # always the same one.
        if self.run_at is not None and self.delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if self.run_at is not None:
            object.__setattr__(self, "run_at", validate.epoch(self.run_at, "run_at"))
        if self.delay is not None:
            validate.duration(self.delay, "delay", allow_zero=True)
        if self.priority is not None:
            validate.integer(self.priority, "priority", *validate.PRIORITY_RANGE)
        if self.max_attempts is not None:
            validate.integer(self.max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        if self.unique_key is not None:
            validate.text(self.unique_key, "unique_key", max_bytes=validate.MAX_KEY_BYTES)
        if self.queue is not None:
            validate.name(self.queue, "queue")
        if self.unique_for is not None:
            # Kept as float seconds: the stored window.
            window = validate.duration(self.unique_for, "unique_for")
            object.__setattr__(self, "unique_for", window)
            if self.unique_key is None:
                raise ConfigurationError(
                    "unique_for needs unique_key: it says how long that key stays taken after "
                    "its job succeeded; pass unique_key= too"
                )
        if self.debounce is not None or self.max_wait is not None:
            self._check_debounce()
        if self.expires_in is not None:
            object.__setattr__(self, "expires_in", validate.duration(self.expires_in, "expires_in"))
        if self.deadline is not None:
            object.__setattr__(self, "deadline", validate.duration(self.deadline, "deadline"))
        if self.after is not None or self.on_upstream_failure != "cancel":
            # Kept as the checked ids (duplicates dropped; an empty list waits for nothing).
            ids = validate.after(self.after, self.on_upstream_failure)
            object.__setattr__(self, "after", ids)

    def _check_debounce(self) -> None:
        if self.debounce is None:
            raise ConfigurationError("max_wait bounds a debounce; pass debounce= too")
        object.__setattr__(self, "debounce", validate.duration(self.debounce, "debounce"))
        if self.max_wait is not None:
            object.__setattr__(self, "max_wait", validate.duration(self.max_wait, "max_wait"))
        if self.unique_key is None:
            raise ConfigurationError(
                "debounce needs unique_key: the key whose one queued job each enqueue "
                "updates; pass unique_key= too"
            )
        names = ("run_at", "delay", "after", "unique_for")
        clash = [n for n in names if getattr(self, n) is not None]
        if clash:
            raise ConfigurationError(
                f"debounce sets when the job runs (debounce after the latest enqueue), so "
                f"{clash[0]}= cannot be given with it; drop one of them"
            )

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str = "enqueue") -> EnqueueOptions:
        """The value of keyword arguments (``where`` names the call in the error for an
        unknown one); no options: the shared default value, built once."""
        if not options:
            return DEFAULT
        if not options.keys() <= _NAME_SET:
            unknown = sorted(str(k) for k in options if k not in _NAME_SET)
            raise ConfigurationError(
                f"unknown option(s) {', '.join(unknown)} for {where}; "
                f"use {', '.join(sorted(NAMES))}"
            )
        return cls(**options)

    @classmethod
    def of_json(cls, options: Mapping[str, Any], where: str) -> EnqueueOptions:
        """The value of options read from JSON or a command line (``POST /api/admin/jobs``,
        ``errands enqueue``): as ``of``, but ``run_at`` may be an ISO 8601 text with its UTC
        offset (``2026-12-01T09:00:00+00:00``) besides unix seconds."""
        run_at = options.get("run_at")
        if isinstance(run_at, str):
            options = {**options, "run_at": parse_time(run_at, "run_at")}
        return cls.of(options, where)

    def merged(self, options: Mapping[str, Any], where: str = "enqueue") -> EnqueueOptions:
        """These options with some replaced (``with_options`` on a bound task; an
        ``options=`` value and keyword arguments given together)."""
        if not options:
            return self
        if self is DEFAULT:
            return EnqueueOptions.of(options, where)
        EnqueueOptions.of(options, where)  # names and values checked with the call's name
        return replace(self, **options)


class EnqueueKwargs(TypedDict, total=False):
    """``EnqueueOptions`` as keyword arguments (``q.enqueue(type, payload, delay=30)``): the
    same names and types, for type checkers; tests/client/test_options.py keeps the two equal."""

    queue: str | None
    priority: int | None
    run_at: datetime | float | None
    delay: float | timedelta | None
    max_attempts: int | None
    unique_key: str | None
    after: Sequence[int] | None
    on_upstream_failure: str
    unique_for: float | timedelta | None
    debounce: float | timedelta | None
    max_wait: float | timedelta | None
    expires_in: float | timedelta | None
    deadline: float | timedelta | None


def parse_time(text: str, name: str) -> datetime | float:
    """An ISO 8601 time with its UTC offset (``Z`` too), or unix seconds written as text; a
    naive time is refused by the check every ``run_at`` meets (``validate.epoch``)."""
    if re.fullmatch(r"\s*\d+(\.\d+)?\s*", text):
        return float(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"{name} {text!r:.60} is not an ISO 8601 time; write e.g. 2026-12-01T09:00:00+00:00 "
            "(with its UTC offset), or unix seconds"
        ) from None


NAMES = tuple(f.name for f in fields(EnqueueOptions))
_NAME_SET = frozenset(NAMES)
DEFAULT = EnqueueOptions()
