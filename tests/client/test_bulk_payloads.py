"""``enqueue_many``'s bulk of flat payloads (issue #26): checked and encoded in one pass over
the whole run (``payload.encode_checked``), with the same promises as one by one — every
payload checked before any write, the first bad item named with its path, nothing written.

The bad payload sits in the middle of a 10,000-item run of alike flat payloads, the shape the
one-pass path takes, so each case attacks one of that pass's shortcuts (types read in C, the
integer range from min/max, NaN from the encoder, NUL/surrogates/size from the whole text)."""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import errands
from errands.core import payload
from errands.core.payload import INT_MAX, INT_MIN

RUN = 10_000
BAD_AT = 5_123


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


class _Hostile:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<hostile>"


def _run(bad: Any, at: int = BAD_AT) -> list[Any]:
    items: list[Any] = [("t", {"n": i, "s": f"job {i}"}) for i in range(RUN)]
    items[at] = ("t", bad)
    return items


def _count(q: errands.Queue) -> int:
    return len(q.jobs(limit=RUN + 10))


# payload, (error class, text the message holds)
REFUSED: dict[str, tuple[Any, type[Exception], str]] = {
    "nan": ({"n": float("nan")}, errands.PayloadError, "payload['n'] is nan"),
    "infinity": ({"n": float("inf")}, errands.PayloadError, "payload['n'] is inf"),
    "-infinity": ({"n": float("-inf")}, errands.PayloadError, "payload['n'] is -inf"),
    "int-above": ({"n": INT_MAX + 1}, errands.PayloadError, "integer of 64 bits"),
    "int-below": ({"n": INT_MIN - 1}, errands.PayloadError, "integer of 64 bits"),
    "int-key": ({1: "a"}, errands.PayloadError, "has the key 1 (int)"),
    "none-key": ({None: "a"}, errands.PayloadError, "has the key None (NoneType)"),
    "int-subclass": ({"c": Colour.RED}, errands.PayloadError, "payload['c'] is a Colour"),
    "str-subclass": ({"s": Name("x")}, errands.PayloadError, "payload['s'] is a Name"),
    "str-subclass-key": ({Name("k"): 1}, errands.PayloadError, "has the key 'k' (Name)"),
    "dict-subclass": (OrderedDict(a=1), errands.PayloadError, "payload is a OrderedDict"),
    "tuple": ({"t": (1, 2)}, errands.PayloadError, "payload['t'] is a tuple"),
    "set": ({"s": {1}}, errands.PayloadError, "payload['s'] is a set"),
    "bytes": ({"b": b"x"}, errands.PayloadError, "payload['b'] is a bytes"),
    "datetime": ({"d": datetime.now(UTC)}, errands.PayloadError, "payload['d'] is a datetime"),
    "nul": ({"s": "a\x00b"}, errands.PayloadError, "payload['s'] holds a NUL character"),
    "nul-key": ({"k\x00": 1}, errands.PayloadError, "a key of payload holds a NUL"),
    "surrogate": ({"s": "\ud800"}, errands.PayloadError, "payload['s'] holds a lone surrogate"),
    "surrogate-key": ({"\udc80": 1}, errands.PayloadError, "a key of payload holds a lone"),
    "list-payload-with-nan": ([1, float("nan")], errands.PayloadError, "payload[1] is nan"),
    "nested-set": ({"a": {"b": {2}}}, errands.PayloadError, "payload['a']['b'] is a set"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_payload_in_the_middle_of_a_10000_item_run_refuses_the_call_and_names_it(
    queue: errands.Queue, case: str
) -> None:
    bad, error, text = REFUSED[case]
    with pytest.raises(error) as caught:
        queue.enqueue_many(_run(bad))
    message = str(caught.value)
    assert message.startswith(f"enqueue_many item {BAD_AT}: "), message
    assert text in message, message
    assert isinstance(caught.value, TypeError)  # as one by one: a TypeError-style error
    assert _count(queue) == 0  # nothing written, not even the 9,999 healthy items


def test_an_oversized_payload_in_a_run_is_refused_by_its_own_size_in_bytes(
    make_queue: Callable[..., errands.Queue],
) -> None:
    # 4-byte characters: 30 of them are 120 bytes, so the longest-text bound (4 bytes a
    # character) cannot clear the run and every payload is measured; the whole run is far
    # over the limit, so the total cannot clear it either.
    q = make_queue(max_payload_bytes=140)
    fits = {"s": "🐢" * 30}  # {"s":"…"} = 8 + 120 = 128 bytes
    over = {"s": "🐢" * 34}  # 8 + 136 = 144 bytes
    items: list[Any] = [("t", fits)] * RUN
    items[BAD_AT] = ("t", over)
    with pytest.raises(errands.PayloadTooLargeError) as caught:
        q.enqueue_many(items)
    assert str(caught.value).startswith(f"enqueue_many item {BAD_AT}: payload is 144 bytes")
    assert "max_payload_bytes" in str(caught.value)
    assert _count(q) == 0
    items[BAD_AT] = ("t", fits)
    ids = q.enqueue_many(items)  # every payload at 128 of 140 bytes: all accepted
    assert len(ids) == RUN
    job = q.get(ids[BAD_AT])
    assert job is not None and job.payload == fits


def test_a_payload_of_exactly_the_limit_in_a_run_is_accepted_and_one_byte_more_is_not(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(max_payload_bytes=64)
    exact = {"s": "é" * 28}  # 8 + 56 = 64 bytes, 36 characters
    items: list[Any] = [("t", {"n": i}) for i in range(RUN)]
    items[-1] = ("t", exact)
    ids = q.enqueue_many(items)
    job = q.get(ids[-1])
    assert job is not None and job.payload == exact
    items[-1] = ("t", {"s": "é" * 28 + "x"})
    with pytest.raises(errands.PayloadTooLargeError, match=f"item {RUN - 1}: payload is 65"):
        q.enqueue_many(items)
    assert _count(q) == RUN  # only the first call's jobs


def test_the_first_bad_item_is_named_whichever_check_finds_the_later_one(
    queue: errands.Queue,
) -> None:
    # Payloads are checked in one pass after the items' shapes, types and options; an
    # earlier bad payload still wins over a later item's own error, of whatever kind.
    later: dict[str, Any] = {
        "malformed item": "t",
        "unknown option": ("t", {}, {"dealy": 1}),
        "bad option": ("t", {}, {"priority": "high"}),
        "bad type name": ("", {}),
        "bad payload, long path": ("t", {"x": {1}}, {"priority": 1}),
    }
    for name, item in later.items():
        items = _run({"n": float("nan")}, at=3_000)
        items[7_000] = item
        with pytest.raises(errands.ErrandsError) as caught:
            queue.enqueue_many(items)
        assert str(caught.value).startswith("enqueue_many item 3000: payload['n'] is nan"), name
        # … and alone, the later item is the one named
        items[3_000] = ("t", {"n": 1})
        with pytest.raises(errands.ErrandsError, match="enqueue_many item 7000: "):
            queue.enqueue_many(items)
    assert _count(queue) == 0


ACCEPTED: dict[str, Any] = {
    "int-bounds": {"max": INT_MAX, "min": INT_MIN},
    "19-digit-ints": {"a": 1_000_000_000_000_000_000, "b": -9_000_000_000_000_000_000},
    "bools-and-ints": {"t": True, "f": False, "n": 0},
    "every-scalar": {"s": "x", "n": -3, "f": 1.5e15, "b": True, "z": None},
    "floats-only": {"f": 0.1, "g": -2.5, "h": 1e-320},
    "empty": {},
    "literal-backslash-u0000": {"s": "\\u0000", "k\\u0000": "text, not a NUL"},
    "unicode": {"s": "żółw 🐢 \u2028\u2029", "🔑": "ok"},
    "control-chars": {"s": '\x01\x1f\t\n"\\'},
    "digits-in-text": {"s": "12345678901234567890123"},
    "nested": {"a": [1, {"b": None}], "c": {"d": "e"}},
}


# The cases the one-pass path takes (flat objects, no backslash-u0000 text, which sends the
# run down the one-by-one path to look for a NUL).
FLAT = [v for k, v in sorted(ACCEPTED.items()) if k not in ("nested", "literal-backslash-u0000")]


def test_the_one_pass_encoding_writes_what_encode_writes_and_hands_hints_back() -> None:
    # No backend involved: the text each payload gets, byte for byte, and the runs that must
    # go one by one (None) so the error can name the item.
    texts = payload.encode_checked(FLAT, 1 << 20)
    assert texts == [payload.encode(v, max_bytes=1 << 20) for v in FLAT]
    for k, v in sorted(ACCEPTED.items()):
        assert payload.encode_checked([v], 1 << 20) in ([payload.encode(v)], None), k
    for k, (bad, _, _) in sorted(REFUSED.items()):
        assert payload.encode_checked([*FLAT, bad, *FLAT], 1 << 20) is None, k


def test_every_accepted_payload_in_a_10000_item_run_comes_back_under_its_own_id(
    queue: errands.Queue,
) -> None:
    # One run of 10,000 alike jobs whose payloads cycle through the flat edge cases (the
    # one-pass path): each id must hold its own payload (one JSON array per statement,
    # ids by range).
    items: list[Any] = [("t", FLAT[i % len(FLAT)] | {"i": i}) for i in range(RUN)]
    assert payload.encode_checked([p for _, p in items], 1 << 20) is not None
    ids = queue.enqueue_many(items)
    assert len(ids) == RUN and ids == sorted(ids)
    for i in [*range(len(FLAT) * 2), RUN // 2, RUN - 1]:
        job = queue.get(ids[i])
        assert job is not None and job.payload == items[i][1], i


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_an_accepted_payload_comes_back_from_a_run_as_from_a_single_enqueue(
    queue: errands.Queue, case: str
) -> None:
    # A run of 50 (below PostgreSQL's COPY threshold: its statement runs on both backends).
    value = ACCEPTED[case]
    one = queue.enqueue("t", value)
    many = queue.enqueue_many([("t", value)] * 50)
    jobs = [queue.get(i) for i in (one, many[0], many[-1])]
    assert all(j is not None and j.payload == value for j in jobs)


def test_a_run_of_one_tasks_jobs_checks_each_payload_against_the_handler_in_order(
    make_queue: Callable[..., errands.Queue],
) -> None:
    # The call of one task's (type, payload) pairs is read in C, but each payload still meets
    # the handler's signature, and an earlier bad payload (the payload rule) is named before
    # a later one the handler refuses.
    q = make_queue()

    @q.task(queue="mail", priority=4, max_attempts=3)
    def send(to: str, n: int = 0) -> None: ...

    def run() -> list[Any]:
        return [("send", {"to": f"u{i}", "n": i}) for i in range(RUN)]

    items = run()
    items[3_000] = ("send", {"to": "x", "n": float("nan")})  # the rule
    items[7_000] = ("send", {"too": "x"})  # the handler
    with pytest.raises(errands.PayloadError, match=r"^enqueue_many item 3000: payload\['n'\]"):
        q.enqueue_many(items)
    items[3_000] = ("send", {"to": "x"})
    with pytest.raises(errands.PayloadError, match=r"^enqueue_many item 7000: "):
        q.enqueue_many(items)
    items[7_000] = ("send", [1])  # not an object at all
    with pytest.raises(errands.PayloadError, match=r"^enqueue_many item 7000: .*JSON object"):
        q.enqueue_many(items)
    assert _count(q) == 0
    items[7_000] = ("send", None)  # no payload: stored as {} would not fit send(to)
    with pytest.raises(errands.PayloadError, match=r"^enqueue_many item 7000: "):
        q.enqueue_many(items)
    ids = q.enqueue_many(run())
    job = q.get(ids[RUN - 1])
    assert job is not None
    assert (job.type, job.queue, job.priority, job.max_attempts) == ("send", "mail", 4, 3)
    assert job.payload == {"to": f"u{RUN - 1}", "n": RUN - 1}


def test_a_run_whose_items_are_not_all_pairs_of_one_type_is_checked_item_by_item(
    queue: errands.Queue,
) -> None:
    # What the one-pass reading hands back to the item loop: the error still names the item.
    cases: dict[str, tuple[Any, str]] = {
        "a list, not a tuple": (["t", {}], "must be (type, payload)"),
        "a one-tuple": (("t",), "must be (type, payload)"),
        "a bad type name": (("a,b", {}), "job type 'a,b' contains a comma"),
        "a non-string type": ((7, {}), "job type must be a non-empty string"),
        "an unhashable type": (([1], {}), "job type must be a non-empty string"),
        "a type whose == raises": ((_Hostile(), {}), "job type must be a non-empty string"),
    }
    for name, (item, text) in cases.items():
        items = _run({"n": 1})
        items[BAD_AT] = item
        with pytest.raises(errands.ErrandsError) as caught:
            queue.enqueue_many(items)
        assert str(caught.value).startswith(f"enqueue_many item {BAD_AT}: "), name
        assert text in str(caught.value), (name, str(caught.value))
    items = _run({"n": 1})
    items[BAD_AT] = ("t", _Hostile())  # a payload whose == raises: refused, never compared
    with pytest.raises(errands.PayloadError, match=rf"^enqueue_many item {BAD_AT}: payload is"):
        queue.enqueue_many(items)
    items = _run({"n": 1})
    items[0] = ("t", None)  # no payload: stored as {}
    items[1] = ("u", {"n": 1})  # a second type
    ids = queue.enqueue_many(items)
    first, second = queue.get(ids[0]), queue.get(ids[1])
    assert first is not None and first.payload == {}
    assert second is not None and second.type == "u"
    with pytest.raises(errands.PayloadError, match=rf"^enqueue_many item {BAD_AT}: payload"):
        queue.enqueue_many(tuple(_run({"n": 2**70})))  # a tuple of items: the item loop
