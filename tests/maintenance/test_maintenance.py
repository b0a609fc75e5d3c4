"""Leader election of maintenance services: one leader per service, per database."""

from __future__ import annotations

from collections.abc import Callable

import errands
from errands.maintenance.runner import Maintenance
from helpers.support import FixedClock


def _periodic_queue(make_queue: Callable[..., errands.Queue], clock: FixedClock) -> errands.Queue:
    q = make_queue(clock=clock)

    @q.periodic(every=60)
    def hourly_digest() -> None:
        return None

    return q


def test_each_service_has_its_own_leader(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = _periodic_queue(make_queue, clock)
    a = Maintenance(q.backend, "a", q.services(), ttl=30)
    b = Maintenance(q.backend, "b", q.services(), ttl=30)
    a.tick(clock.now)
    b.tick(clock.now)
    assert set(a.leading) == {"rescue", "deps", "expiry", "periodic", "prune", "wal"}
    assert all(a.leading.values()) and not any(b.leading.values())

    # The leader steps down cleanly: the other takes every role on its next renewal.
    a.stop()
    clock.advance(b.renew_every)
    b.tick(clock.now)
    assert all(b.leading.values())


def test_a_worker_without_schedules_never_starves_them(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    # Two apps share one database; the one without periodic tasks is elected first.
    plain = make_queue(clock=clock)
    scheduled = _periodic_queue(make_queue, clock)
    first = Maintenance(plain.backend, "plain", plain.services(), ttl=30)
    second = Maintenance(scheduled.backend, "scheduled", scheduled.services(), ttl=30)
    first.tick(clock.now)
    clock.advance(61)  # past the first tick of the schedule
    first.tick(clock.now)
    second.tick(clock.now)

    leads = {"rescue": True, "deps": True, "expiry": True, "prune": True, "wal": True}
    assert first.leading == leads
    assert second.leading["periodic"] and not second.leading["rescue"]
    assert [j.type for j in scheduled.jobs(type="hourly_digest")] == ["hourly_digest"]


def test_a_lapsed_leader_is_replaced_after_its_lease(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    a = Maintenance(q.backend, "a", q.services(), ttl=30)
    b = Maintenance(q.backend, "b", q.services(), ttl=30)
    a.tick(clock.now)  # a leads, then dies without resigning
    clock.advance(10)
    b.tick(clock.now)
    assert not b.leading["rescue"]
    clock.advance(25)  # a's lease (30 s) has run out
    b.tick(clock.now)
    assert b.leading["rescue"]


def test_startup_cleanup_releases_a_dead_leaders_roles(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    dead = Maintenance(q.backend, "host:1:dead", q.services(), ttl=600)
    dead.tick(clock.now)
    assert all(dead.leading.values())
    q.backend.recover_workers(["host:1:dead"], clock.now)
    heir = Maintenance(q.backend, "host:2:heir", q.services(), ttl=600)
    heir.tick(clock.now)  # no need to wait out the dead leader's 600 s leases
    assert all(heir.leading.values())
