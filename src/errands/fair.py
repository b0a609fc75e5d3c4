"""Fair share, the application's side (docs/flow-control.md): ``Fair`` for
``@q.task(fair=…)``, and what ``Queue.fairness`` reads back as ``FairInfo``.

The turns themselves are taken by the claim (backends/fair.py). A fair task's jobs are
stored as limited jobs whose group is their fair value — under the task's own limit key when
it has a ``Limit`` (whose group must then be the same field), else under ``fair:<field>`` —
so the claim finds each value's jobs with the same skip scan and locks as a limit's groups,
and a capped group is simply not eligible.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from .backends.base import FairWeights
from .core import validate
from .errors import ConfigurationError

Field = str | Callable[[Mapping[str, Any]], Any]
KEY_PREFIX = "fair:"  # the limit key of a fair task without a Limit of its own
MAX_WEIGHT = 1_000_000


@dataclass(frozen=True, slots=True)
class Fair:
    """Serve the due jobs of each value of ``field`` (a payload field name, or a callable of
    the payload) in turn: ``weights[value]`` starts per turn for the values named there,
    ``default_weight`` for the others (jobs without the field form one value, '')."""

    field: Field
    weights: Mapping[str, float] = dc_field(default_factory=dict)
    default_weight: float = 1

    def __post_init__(self) -> None:
        if isinstance(self.field, str):
            validate.text(self.field, "fair field", max_bytes=validate.MAX_KEY_BYTES)
        elif not callable(self.field):
            raise ConfigurationError(
                "Fair field must be a payload field name or a callable of the payload, "
                f"got {type(self.field).__name__}"
            )
        if not isinstance(self.weights, Mapping):
            raise ConfigurationError(
                f"Fair weights must be a dict of value -> weight, got {type(self.weights).__name__}"
            )
        for value, weight in self.weights.items():
            if not isinstance(value, str):
                raise ConfigurationError(
                    f"Fair weights: the value {value!r:.40} is not text; fair values are "
                    "compared as text (42 -> '42'), so write it as a string"
                )
            _weight(weight, f"Fair weight of {value!r:.40}")
        _weight(self.default_weight, "Fair default_weight")
        object.__setattr__(self, "weights", dict(self.weights))

    @property
    def name(self) -> str:
        """The field's name (a callable's ``__name__``)."""
        f = self.field
        return f if isinstance(f, str) else getattr(f, "__name__", "fair")

    def key(self) -> str:
        """The limit key this fair task's jobs are stored under when it has no Limit."""
        return KEY_PREFIX + self.name

    def value_of(self, payload: Any, key: str) -> str:
        """This payload's fair value: its field as text ('' when missing; 42 -> '42')."""
        f = self.field
        if isinstance(f, str):
            value = payload.get(f) if isinstance(payload, Mapping) else None
        else:
            value = f(payload)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return validate.group(text, key)

    def spec(self) -> FairWeights:
        """The weights as the claim reads them."""
        return FairWeights(dict(self.weights), float(self.default_weight))


def _weight(w: Any, what: str) -> None:
    if (
        isinstance(w, bool)
        or not isinstance(w, int | float)
        or not math.isfinite(w)
        or not 0 < w <= MAX_WEIGHT
    ):
        raise ConfigurationError(
            f"{what} must be a number over 0 and at most {MAX_WEIGHT:,}, got {w!r:.40}"
        )


def fair_specs(options: Iterable[Any]) -> dict[str, FairWeights]:
    """The fair keys of a worker's tasks (their TaskOptions), each with its weights."""
    return {o.fair_key(): o.fair.spec() for o in options if o.fair is not None}


def fair_of(value: Any) -> Fair | None:
    """``@q.task(fair=…)``'s argument: a field name, a callable, or a Fair."""
    if value is None or isinstance(value, Fair):
        return value
    if isinstance(value, str) or callable(value):
        return Fair(value)
    raise ConfigurationError(
        "fair must be a payload field name, a callable of the payload or an errands.Fair, "
        f"got {type(value).__name__}"
    )


@dataclass(frozen=True, slots=True)
class FairInfo:
    """One value of a fair key as ``q.fairness()`` shows it: jobs due now, queued in all,
    running, and attempts started in the last ``minutes``."""

    key: str
    value: str
    due: int
    queued: int
    running: int
    served: int
    minutes: float

    def to_dict(self) -> dict[str, Any]:
        """The value as JSON (``errands fair --json``)."""
        return {
            "key": self.key,
            "value": self.value,
            "due": self.due,
            "queued": self.queued,
            "running": self.running,
            "served": self.served,
            "minutes": self.minutes,
        }


def fairness(backend: Any, keys: Iterable[str], now: float, minutes: float) -> list[FairInfo]:
    """What ``Queue.fairness`` shows: per value of each fair key (``keys``, and every key
    with stored turns), its jobs due, queued, running, and starts in the last ``minutes``."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not 0 < minutes <= 1440:
        raise ConfigurationError(
            f"minutes must be a number over 0 and at most 1440, got {minutes!r:.40}"
        )
    every = sorted(set(keys) | set(backend.fair_keys()))
    rows = backend.fair_usage(every, now, now - minutes * 60)
    return [FairInfo(**r, minutes=float(minutes)) for r in rows]
