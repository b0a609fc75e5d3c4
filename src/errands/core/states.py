"""The job state machine, defined once as data.

Every fenced transition's SQL binds its ``from``/``to`` states from ``TRANSITIONS`` (see the
backends), so the guard in the database and this table cannot drift apart. ``docs/states.md``
draws the same machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    # enqueued after=[…] (its upstream jobs are not all final yet), or parked in
    # ctx.wait_for() until a signal or its timeout (docs/durable-steps.md)
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
ACTIVE: frozenset[State] = frozenset({State.QUEUED, State.RUNNING})
# Not final yet: what the head of an ordered value may be (docs/flow-control.md, "Order per
# key"; the partial index jobs_order_head).
UNFINISHED: frozenset[State] = frozenset(State) - TERMINAL


class AttemptStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"
    CANCELLED = "cancelled"
    SNOOZED = "snoozed"  # raise errands.Snooze: the job comes back later, no attempt used up


class Event(StrEnum):
    ENQUEUED = "ENQUEUED"
    CLAIMED = "CLAIMED"
    STARTED = "STARTED"
    HEARTBEAT = "HEARTBEAT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    CANCELLED = "CANCELLED"
    RECOVERED = "RECOVERED"
    RETRIED = "RETRIED"
    RELEASED = "RELEASED"
    # Not a transition (the job stays running): an operator asked its worker to stop it.
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    SNOOZED = "SNOOZED"
    WAITING = "WAITING"  # enqueued after other jobs (detail: their ids)
    READY = "READY"  # its last upstream became final: queued (detail: that upstream)
    # Operator edits that keep the state (not transitions): run now moves a queued job's
    # future run_at to now; a priority change. Detail: the old and new values.
    RESCHEDULED = "RESCHEDULED"
    PRIORITY_CHANGED = "PRIORITY_CHANGED"
    # Durable steps (docs/durable-steps.md): a run that ends in ctx.sleep() (queued until its
    # wake time) or ctx.wait_for() (waiting for a signal), and a wait ended by its signal or
    # its timeout (detail says which).
    SLEEPING = "SLEEPING"
    SIGNAL_WAIT = "SIGNAL_WAIT"
    SIGNALLED = "SIGNALLED"
    # Time rules (docs/flow-control.md): an enqueue of a debounce key replaced the payload and
    # run_at of its queued job instead of adding one (detail: the new run_at).
    DEBOUNCED = "DEBOUNCED"


# HEARTBEAT would write a row per running job per beat; STARTED is recorded with the outcome
# (its ts is the real start), so both cost little only when asked for.
DEFAULT_AUDIT: frozenset[Event] = frozenset(Event) - {Event.HEARTBEAT, Event.STARTED}


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    source: frozenset[State]
    target: State
    event: Event | None


def _t(name: str, source: set[State], target: State, event: Event | None) -> Transition:
    return Transition(name, frozenset(source), target, event)


TRANSITIONS: dict[str, Transition] = {
    t.name: t
    for t in (
        _t("enqueue", set(), State.QUEUED, Event.ENQUEUED),
        _t("claim", {State.QUEUED}, State.RUNNING, Event.CLAIMED),
        _t("succeed", {State.RUNNING}, State.SUCCEEDED, Event.SUCCEEDED),
        _t("fail", {State.RUNNING}, State.FAILED, Event.FAILED),
        _t("retry_later", {State.RUNNING}, State.QUEUED, Event.RETRY_SCHEDULED),
        _t("cancel_running", {State.RUNNING}, State.CANCELLED, Event.CANCELLED),
        _t("release", {State.RUNNING}, State.QUEUED, Event.RELEASED),
        _t("snooze", {State.RUNNING}, State.QUEUED, Event.SNOOZED),
        _t("recover", {State.RUNNING}, State.QUEUED, Event.RECOVERED),
        _t("recover_exhausted", {State.RUNNING}, State.FAILED, Event.RECOVERED),
        _t("cancel", {State.QUEUED}, State.CANCELLED, Event.CANCELLED),
        # The deadline time rule (docs/flow-control.md): a queued job past it fails unstarted.
        _t("miss_deadline", {State.QUEUED}, State.FAILED, Event.FAILED),
        _t("retry", {State.FAILED, State.CANCELLED}, State.QUEUED, Event.RETRIED),
        # Dependencies (backends/deps.py): a job enqueued after=[…] waits; the transaction
        # that makes its last upstream final queues it, or cancels it (UPSTREAM:FAILED).
        _t("enqueue_waiting", set(), State.WAITING, Event.WAITING),
        _t("ready", {State.WAITING}, State.QUEUED, Event.READY),
        _t("cancel_upstream", {State.WAITING}, State.CANCELLED, Event.CANCELLED),
        _t("cancel_waiting", {State.WAITING}, State.CANCELLED, Event.CANCELLED),
        # A manual retry of an upstream revives the dependents its failure cancelled.
        _t("revive", {State.CANCELLED}, State.WAITING, Event.RETRIED),
        # Durable steps (backends/steps.py): a run suspends without using up an attempt.
        _t("sleep", {State.RUNNING}, State.QUEUED, Event.SLEEPING),
        _t("park", {State.RUNNING}, State.WAITING, Event.SIGNAL_WAIT),
        _t("signal", {State.WAITING}, State.QUEUED, Event.SIGNALLED),
    )
}


# The operator's edits of a job that keep its state, and the states each is fenced on (the
# SQL binds them from here, as it binds the transitions'): run now takes a queued job whose
# run_at is later (a scheduled job, or a retry waiting out its backoff); a priority change, a
# job not yet claimed; a delete, any job but a running one (cancel it first) — and never one
# a waiting job depends on (docs/pipelines.md, as prune).
RUN_NOW_FROM: frozenset[State] = frozenset({State.QUEUED})
REPRIORITIZE_FROM: frozenset[State] = frozenset({State.QUEUED, State.WAITING})
DELETE_FROM: frozenset[State] = frozenset(State) - {State.RUNNING}


def transition(name: str) -> Transition:
    return TRANSITIONS[name]


def single_source(name: str) -> State:
    """The one state a fenced transition starts from (bound into its SQL guard)."""
    (state,) = TRANSITIONS[name].source
    return state
