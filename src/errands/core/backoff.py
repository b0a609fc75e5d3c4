"""Retry delay strategies: ``attempt -> seconds`` callables, capped, with jitter by default."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigurationError
from . import validate

Backoff = Callable[[int], float]
log = logging.getLogger("errands.worker")

# +-20% spreads retries of jobs that failed together (an outage) so they do not return together.
_JITTER = 0.2


@dataclass(frozen=True, slots=True)
class _Strategy:
    kind: str
    base: float
    cap: float
    jitter: bool

    def __call__(self, attempt: int) -> float:
        if self.kind == "exponential":
            raw = self.base ** min(attempt, 64)
        elif self.kind == "linear":
            raw = self.base * attempt
        else:
            raw = self.base
        delay = min(float(raw), self.cap)
        if self.jitter:
            delay *= random.uniform(1 - _JITTER, 1 + _JITTER)
        return max(0.0, min(delay, self.cap))


def _check(name: str, value: float) -> float:
    # ConfigurationError is a ValueError, as this raised before.
    return validate.duration(value, f"backoff {name}", allow_zero=True)


def exponential(base: float = 2.0, cap: float = 3600.0, *, jitter: bool = True) -> Backoff:
    """``base ** attempt`` seconds (2, 4, 8 … for base 2), at most ``cap``."""
    # base ** 64 must stay a float (1e4 ** 64 = 1e256); the cap bounds the delay anyway.
    if not isinstance(base, int | float) or isinstance(base, bool) or not 1 <= base <= 1e4:
        raise ConfigurationError(
            f"exponential backoff base must be between 1 and 10000, got {base!r:.60}"
        )
    return _Strategy(
        "exponential", float(base), _check("cap", cap), validate.flag(jitter, "jitter")
    )


def linear(step: float = 10.0, cap: float = 3600.0, *, jitter: bool = True) -> Backoff:
    """``step * attempt`` seconds, at most ``cap``."""
    return _Strategy("linear", _check("step", step), _check("cap", cap), jitter)


def fixed(seconds: float, *, jitter: bool = False) -> Backoff:
    """The same delay after every failed attempt."""
    s = _check("delay", seconds)
    return _Strategy("fixed", s, s * (1 + _JITTER) if jitter else s, jitter)


DEFAULT_BACKOFF: Backoff = exponential()


def delay_for(backoff: Backoff, attempt: int) -> float:
    """Call a user's backoff; a nonsense answer (an exception, NaN, a negative or endless
    delay) is never scheduled — it would be stored as a time no one can read — and never
    raised into the worker: the default backoff stands in, with a warning."""
    try:
        delay = float(backoff(attempt))
    except Exception as exc:
        delay, why = math.nan, f"raised {type(exc).__name__}: {exc}"
    else:
        why = f"returned {delay!r}"
    if 0 <= delay <= validate.MAX_DURATION:  # also refuses NaN and infinity
        return delay
    log.warning(
        "backoff %s for attempt %d; using the default backoff instead (return seconds between "
        "0 and %.0f)",
        why,
        attempt,
        validate.MAX_DURATION,
    )
    return DEFAULT_BACKOFF(attempt)
