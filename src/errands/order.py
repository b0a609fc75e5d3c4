"""Order per key, the application's side (docs/flow-control.md, "Order per key"):
``@q.task(order=…, order_on_failure=…)``.

The claim keeps the order (backends/order.py). An ordered task's jobs are stored as limited
jobs whose group is their value — under the task's Limit key when it has one, else its fair
key, else ``order:<field>`` — so the limited claim's skip scan finds each value with jobs
waiting, and takes of each only its head: the lowest-id job of the value not yet finished.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .backends.verbs import ReadVerbs
from .core import validate
from .errors import ConfigurationError

Field = str | Callable[[Mapping[str, Any]], Any]
KEY_PREFIX = "order:"  # the limit key of an ordered task with no Limit nor fair share
ON_FAILURE = ("continue", "block")


@dataclass(frozen=True, slots=True)
class Order:
    """Run the jobs of each value of ``field`` (a payload field name, or a callable of the
    payload) one at a time in id order; ``on_failure``: what a head that ends failed does to
    the jobs after it ("continue": the next goes; "block": they wait until it is retried or
    cancelled)."""

    field: Field
    on_failure: str = "continue"

    def __post_init__(self) -> None:
        if isinstance(self.field, str):
            validate.text(self.field, "order field", max_bytes=validate.MAX_KEY_BYTES)
        elif not callable(self.field):
            raise ConfigurationError(
                "order must be a payload field name or a callable of the payload, "
                f"got {type(self.field).__name__}"
            )
        if self.on_failure not in ON_FAILURE:
            raise ConfigurationError(
                f"order_on_failure must be 'continue' or 'block', got {self.on_failure!r:.40}"
            )

    @property
    def name(self) -> str:
        """The field's name (a callable's ``__name__``)."""
        f = self.field
        return f if isinstance(f, str) else getattr(f, "__name__", "order")

    @property
    def blocks(self) -> bool:
        """Whether a failed head holds back the jobs after it."""
        return self.on_failure == "block"

    def key(self) -> str:
        """The limit key of this ordered task's jobs when it has no Limit nor fair share."""
        return KEY_PREFIX + self.name

    def value_of(self, payload: Any, key: str) -> str:
        """This payload's value: its field as text ('' when missing; 42 -> '42')."""
        f = self.field
        if isinstance(f, str):
            value = payload.get(f) if isinstance(payload, Mapping) else None
        else:
            value = f(payload)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return validate.group(text, key)


def order_of(value: Any, on_failure: Any) -> Order | None:
    """``@q.task(order=…, order_on_failure=…)``'s arguments as an Order (None: not ordered)."""
    if value is None:
        if on_failure != "continue":
            raise ConfigurationError(
                "order_on_failure is given without order: name the payload field whose "
                "values keep their order (order='account_id')"
            )
        return None
    if isinstance(value, str) or callable(value):
        return Order(value, on_failure)
    raise ConfigurationError(
        "order must be a payload field name or a callable of the payload, "
        f"got {type(value).__name__}"
    )


def order_specs(options: Iterable[Any]) -> dict[str, bool]:
    """The ordered keys of a worker's tasks (their TaskOptions), each with whether a failed
    head blocks it. Tasks sharing a key must agree (ConfigurationError)."""
    out: dict[str, bool] = {}
    for o in options:
        key = o.order_key()
        if key is None:
            continue
        if key in out and out[key] != o.order.blocks:
            raise ConfigurationError(
                f"two tasks order the jobs of key {key!r}, one with order_on_failure='block' "
                "and one without: tasks sharing a key must agree"
            )
        out[key] = o.order.blocks
    return out


def blocked_heads(reads: ReadVerbs, now: float) -> list[dict[str, Any]]:
    """Each value of a blocking ordered key held back by a failed head: ``key``, ``value``
    and ``head_id`` (what ``errands check`` and the dashboard's queues page show)."""
    # The keys whose failed heads block, as the workers running them declared them.
    keys = sorted(
        {
            str(t.options["order_key"])
            for t in reads.task_types()
            if t.options.get("order_on_failure") == "block" and "order_key" in t.options
        }
    )
    return reads.order_blocked(keys, now)


def blocked(reads: ReadVerbs, now: float) -> list[str]:
    """What ``errands check`` reports: each blocked value with its head's id and what lets
    the value go on."""
    return [
        f"ordered key {r['key']!r} value {r['value']!r} is blocked by failed job "
        f"#{r['head_id']} (order_on_failure='block'): `errands retry {r['head_id']}` runs it "
        f"again; `errands delete {r['head_id']}` gives up on it and lets the jobs after it go"
        for r in blocked_heads(reads, now)
    ]
