"""One payload rule on every backend (issue #8 §2): what SQLite accepts, PostgreSQL stores
and ``errands graduate`` copies. Refused before any write, with the JSON path named."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.core.payload import INT_MAX, INT_MIN, MAX_DEPTH


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


REFUSED: dict[str, tuple[Any, str]] = {
    "nul": ({"s": "a\x00b"}, "payload['s'] holds a NUL character at index 1"),
    "nul-deep": ({"a": [{"b": "\x00"}]}, "payload['a'][0]['b'] holds a NUL character"),
    "nul-key": ({"k\x00": 1}, "a key of payload holds a NUL character"),
    "high-surrogate": ({"s": "\ud800"}, "payload['s'] holds a lone surrogate"),
    "low-surrogate": ({"s": ["x", "\udc80"]}, "payload['s'][1] holds a lone surrogate"),
    "surrogate-key": ({"\udc80": 1}, "a key of payload holds a lone surrogate"),
    "int-above": ({"n": INT_MAX + 1}, "payload['n'] is an integer of 64 bits, outside the"),
    "int-below": ({"n": INT_MIN - 1}, "payload['n'] is an integer of 64 bits, outside the"),
    "10**5000": ({"n": 10**5000}, "payload['n'] is an integer of 16610 bits"),
    "too-deep": ({"d": _nested(MAX_DEPTH)}, f"nested deeper than {MAX_DEPTH} levels"),
    "very-deep": ({"d": _nested(5000)}, f"nested deeper than {MAX_DEPTH} levels"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_payload_no_backend_can_store_exactly_is_refused_with_its_path(
    queue: errands.Queue, case: str
) -> None:
    payload, message = REFUSED[case]
    with pytest.raises(errands.PayloadError) as caught:
        queue.enqueue("t", payload)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(errands.PayloadError):
        queue.enqueue_many([("t", {"fine": 1}), ("t", payload)])
    assert queue.jobs() == []  # nothing written, not even the batch's healthy item


ACCEPTED: dict[str, Any] = {
    "int-bounds": {"max": INT_MAX, "min": INT_MIN},
    "depth-limit": {"d": _nested(MAX_DEPTH - 1)},
    "literal-backslash-u0000": {"s": "\\u0000", "k\\u0000": "text, not a NUL"},
    "unicode": {"s": "żółw 🐢 \u2028", "emoji-key-🔑": "ok"},
    "control-chars": {"s": "\x01\x1f\t\n"},
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_everything_accepted_comes_back_exactly(queue: errands.Queue, case: str) -> None:
    payload = ACCEPTED[case]
    job = queue.get(queue.enqueue("t", payload))
    assert job is not None and job.payload == payload


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_everything_accepted_comes_back_exactly_through_enqueue_many(
    queue: errands.Queue, case: str
) -> None:
    # 40 alike jobs go in as one run (their payload texts inside one JSON array, unescaped by
    # the database); jobs with differing options through the per-row batch statement. Both
    # stay below PostgreSQL's COPY threshold, so both statements run on both backends.
    payload = ACCEPTED[case]
    alike = queue.enqueue_many([("t", payload)] * 40)
    mixed = queue.enqueue_many([("t", payload, {"priority": n}) for n in range(3)])
    for job_id in alike + mixed:
        job = queue.get(job_id)
        assert job is not None and job.payload == payload, job_id


# -- graduate: rows an older errands wrote ---------------------------------------------------


def _old_rows(path: str) -> dict[str, int]:
    """A queue file holding rows the current errands refuses to write, inserted directly as
    an older errands could: NUL escapes in JSON, bytes that are not UTF-8, NUL in text."""
    with errands.Queue(path) as q:
        ids = {"good": q.enqueue("t", {"n": 1}), "nul": q.enqueue("t", {"n": 2})}
        ids["surrogate"] = q.enqueue("t", {"n": 3})
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE jobs SET payload = ? WHERE id = ?", ('{"s":"a\\u0000b"}', ids["nul"]))
        # '{"s":"' + ED A0 80 (a lone surrogate, as SQLite's json_extract stored one) + '"}'
        conn.execute(
            "UPDATE jobs SET result = CAST(X'7B2273223A22EDA080227D' AS TEXT), "
            "error_detail = 'bad' || char(0) || 'msg' WHERE id = ?",
            (ids["surrogate"],),
        )
    conn.close()
    return ids


def _graduate(path: str, pg_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "errands", "graduate", "--db", path, "--to", pg_url],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_graduate_names_every_row_it_cannot_copy_and_copies_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    path = str(tmp_path / "old.db")
    ids = _old_rows(path)
    with errands.Queue(path) as q:  # still readable through errands
        bad = q.get(ids["surrogate"])
        assert bad is not None and bad.result == {"s": "\ufffd\ufffd\ufffd"}
        assert bad.error_detail == "bad\x00msg"

    r = _graduate(path, pg_url, tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("errands: 3 value(s)") and "nothing was copied" in lines[0]
    assert f"  jobs id {ids['nul']}: payload['s'] holds a NUL character at index 1" in lines
    assert (
        f"  jobs id {ids['surrogate']}: result['s'] holds a lone surrogate ('\\udced') at index 0"
        in lines
    )
    assert f"  jobs id {ids['surrogate']}: error_detail holds a NUL character at index 3" in lines
    assert lines[-1].startswith("fix or clear them in the SQLite file")
    with errands.Queue(pg_url) as target:
        assert target.jobs() == []

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")  # their attempts and events go with them
    with conn:
        conn.execute("DELETE FROM jobs WHERE id IN (?, ?)", (ids["nul"], ids["surrogate"]))
    conn.close()
    r = _graduate(path, pg_url, tmp_path)
    assert r.returncode == 0, (r.stdout, r.stderr)
    with errands.Queue(pg_url) as target:
        assert [j.id for j in target.jobs()] == [ids["good"]]


def test_graduate_reports_a_row_postgresql_refuses_in_one_line(tmp_path: Path, pg_url: str) -> None:
    """Rows PostgreSQL refuses for other reasons (here: events whose job was deleted without
    foreign keys enforced) end in a one-line error naming the table and ids, not a traceback."""
    path = str(tmp_path / "orphans.db")
    with errands.Queue(path) as q:
        orphan = q.enqueue("t", {"n": 1})
    conn = sqlite3.connect(path)  # foreign_keys off: the job's ENQUEUED event stays behind
    with conn:
        conn.execute("DELETE FROM jobs WHERE id = ?", (orphan,))
    conn.close()
    r = _graduate(path, pg_url, tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("errands: PostgreSQL refused a batch of job_events")
    assert "run graduate again" in last
