"""Retry delay strategies: ``attempt -> seconds`` callables, capped, with jitter by default."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Backoff = Callable[[int], float]

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
    if value < 0:
        raise ValueError(f"backoff {name} must be >= 0 seconds, got {value}")
    return float(value)


def exponential(base: float = 2.0, cap: float = 3600.0, *, jitter: bool = True) -> Backoff:
    """``base ** attempt`` seconds (2, 4, 8 … for base 2), at most ``cap``."""
    if base < 1:
        raise ValueError(f"exponential backoff base must be >= 1, got {base}")
    return _Strategy("exponential", float(base), _check("cap", cap), jitter)


def linear(step: float = 10.0, cap: float = 3600.0, *, jitter: bool = True) -> Backoff:
    """``step * attempt`` seconds, at most ``cap``."""
    return _Strategy("linear", _check("step", step), _check("cap", cap), jitter)


def fixed(seconds: float, *, jitter: bool = False) -> Backoff:
    """The same delay after every failed attempt."""
    s = _check("delay", seconds)
    return _Strategy("fixed", s, s * (1 + _JITTER) if jitter else s, jitter)


DEFAULT_BACKOFF: Backoff = exponential()


def delay_for(backoff: Backoff, attempt: int) -> float:
    """Call a user's backoff and refuse a nonsense answer rather than scheduling it."""
    delay = float(backoff(attempt))
    if not delay >= 0:  # also catches NaN
        raise ValueError(f"backoff returned {delay!r} for attempt {attempt}; return seconds >= 0")
    return delay
