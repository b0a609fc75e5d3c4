"""The overview's charts per job type and queue over 24 h and 7 d (issue #25), on both
backends through Starlette's TestClient: each type's wait and run p50/p95 per hour from its
rows still kept plus the hourly rollup of its pruned ones — the same figures before and after
a prune —, the page and its JSON twin (``/api/admin/charts``) answering the same query string
with the same numbers, and hostile or absurd filters answered with 400 or an empty chart,
never a 500 or a cache that grows without bound.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from helpers.ops import HOUR, run_job
from helpers.support import sql_rows

DAY = 24 * HOUR


def history(q: errands.Queue) -> dict[str, Any]:
    """``resize`` jobs in queues ``default`` and ``images`` over the last five days, ``mail``
    jobs beside them with far longer runs, one ``resize`` failed after a retry, and one
    cancelled before it started. Returns the hours (epoch of their start) it wrote into."""
    now = time.time()
    this_hour = now - now % HOUR
    hours: dict[str, float] = {}
    # Three hours: 2 h, 30 h and 100 h ago, three resize jobs each (waits 1, 2, 20 s; runs
    # 0.2, 0.4, 3 s), in the middle of the hour so no value crosses an hour's edge.
    for name, back in (("recent", 2), ("yesterday", 30), ("days", 100)):
        start = this_hour - back * HOUR + 600
        hours[name] = this_hour - back * HOUR
        for i, (wait, run) in enumerate(((1.0, 0.2), (2.0, 0.4), (20.0, 3.0))):
            at = start + i * 60
            run_job(
                q,
                "resize",
                run_at=at,
                started=at + wait,
                finished=at + wait + run,
                queue="images" if i == 2 else "default",
            )
            run_job(q, "mail", run_at=at, started=at + 500, finished=at + 500 + 400)
    # One resize failing after a retried first attempt: its last attempt runs 7 s.
    at = this_hour - 2 * HOUR + 1800
    run_job(
        q,
        "resize",
        run_at=at,
        started=at + 4,
        finished=at + 11,
        outcome="failed",
        failures_first=1,
    )
    q.cancel(q.enqueue("resize", {}, delay=3600), actor="ops")  # cancelled, never started
    return {"hours": hours, "now": now}


def charts_json(c: TestClient, query: str) -> list[dict[str, Any]]:
    r = c.get(f"/api/admin/charts?{query}")
    assert r.status_code == 200, r.text
    hours: list[dict[str, Any]] = r.json()["hours"]
    return hours


def hour_of(rows: list[dict[str, Any]], start: float) -> dict[str, Any]:
    (row,) = [h for h in rows if h["hour"] == start]
    return row


@pytest.fixture
def pruning_queue(make_queue: Callable[..., errands.Queue]) -> errands.Queue:
    """A queue whose finished jobs are all past retention a second after they finish."""
    return make_queue(retention={"succeeded": 1, "failed": 1, "cancelled": 1})


def test_a_types_charts_read_the_same_before_and_after_pruning(
    db_url: str, pruning_queue: errands.Queue
) -> None:
    q = pruning_queue
    world = history(q)
    c = TestClient(create_app(q))
    before = {
        query: charts_json(c, query)
        for query in (
            "window=7d&type=resize",
            "window=24h&type=resize",
            "window=7d&type=resize&queue=images",
            "window=7d&type=mail",
            "window=7d",
        )
    }
    week = before["window=7d&type=resize"]
    assert len(week) == 168 and len(before["window=24h&type=resize"]) == 24
    recent = hour_of(week, world["hours"]["recent"])
    # 3 successes and 1 failure: waits 1, 2, 20, 4 s and last-attempt runs 0.2, 0.4, 3, 7 s;
    # percentiles at their bucket's upper bound (rollup.BOUNDS), never above the largest.
    assert (recent["succeeded"], recent["failed"], recent["cancelled"]) == (3, 1, 0)
    assert (recent["wait_count"], recent["run_count"]) == (4, 4)
    assert (recent["wait_p50"], recent["wait_p95"]) == (2.5, 20.0)
    assert (recent["run_p50"], recent["run_p95"]) == (0.5, 7.0)
    for name in ("yesterday", "days"):
        old = hour_of(week, world["hours"][name])
        assert (old["succeeded"], old["run_p50"], old["run_p95"]) == (3, 0.5, 3.0)
    # Only the type asked for: mail's 400 s runs never show in resize's charts, and back.
    assert max(h["run_p95"] or 0 for h in week) == 7.0
    # (400 s is in the bucket up to 600 s: shown as the largest value seen, 400 s.)
    assert {h["run_p50"] for h in before["window=7d&type=mail"] if h["run_count"]} == {400.0}
    images = before["window=7d&type=resize&queue=images"]
    assert sum(h["succeeded"] for h in images) == 3
    assert {h["run_p50"] for h in images if h["run_count"]} == {3.0}
    # The 24-hour window holds the recent hour only (the others are 30 h and 100 h back).
    assert sum(h["succeeded"] for h in before["window=24h&type=resize"]) == 3
    # The 7-day window reaches the hour 100 h back; the cancelled job has no wait or run.
    assert sum(h["succeeded"] + h["failed"] for h in week) == 10
    assert sum(h["cancelled"] for h in week) == 1
    assert sum(h["wait_count"] for h in week) == 10

    report = q.prune(now=time.time() + 5)  # the cancelled job too: it finished just now
    assert report.total == 20  # 19 resize and mail rows run, 1 cancelled: all past retention
    assert sql_rows(db_url, "SELECT COUNT(*) FROM jobs")[0][0] == 0
    assert sql_rows(db_url, "SELECT COUNT(*) FROM job_stats_hourly")[0][0] > 0
    app = create_app(q)  # nothing kept from before
    after = {query: charts_json(TestClient(app), query) for query in before}
    assert after == before


def shown(seconds: float) -> str:
    """A point's value as its hover text says it: under a second in ms."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:g} s"


def test_the_page_and_its_json_twin_show_the_same_charts(queue: errands.Queue) -> None:
    world = history(queue)
    c = TestClient(create_app(queue))
    query = "window=7d&type=resize&queue=default"
    html = c.get(f"/?{query}").text
    hours = charts_json(c, query)
    finished = sum(h["succeeded"] + h["failed"] + h["cancelled"] for h in hours)
    assert finished == 8  # 2 per hour in default over 3 hours, the failed one, the cancelled
    assert re.search(rf"last 7d · {finished} jobs", html)
    # Every p50/p95 point of the page's wait and run charts is an hour of the JSON.
    titles = [unescape(t) for t in re.findall(r"<title>([^<]*: p(?:50|95) [^<]*)</title>", html)]
    expected = {
        f"{p} {shown(h[f'{m}_{p}'])}"
        for h in hours
        for m in ("wait", "run")
        for p in ("p50", "p95")
        if h[f"{m}_{p}"] is not None
    }
    assert {t.split(": ", 1)[1] for t in titles} == expected
    assert len(titles) == 2 * sum(1 for h in hours if h["wait_count"]) + 2 * sum(
        1 for h in hours if h["run_count"]
    )
    # The selectors show what is chosen, and the page says whose charts these are.
    assert re.search(r'<option value="resize" selected>resize</option>', html)
    assert re.search(r'<option value="default" selected>default</option>', html)
    assert 'id="chart-scope"' in html
    # The links keep the filters: the other window, and the JSON twin.
    links = {unescape(u) for u in re.findall(r'href="([^"]+)"', html)}
    assert "http://testserver/?window=24h&type=resize&queue=default" in links
    assert f"http://testserver/api/admin/charts?{query}" in links
    assert world["hours"]["recent"] in {h["hour"] for h in hours}


def test_a_queue_alone_reads_the_minute_figures_of_that_queue(queue: errands.Queue) -> None:
    history(queue)
    c = TestClient(create_app(queue))
    every = charts_json(c, "window=7d")
    images = charts_json(c, "window=7d&queue=images")
    assert sum(h["succeeded"] for h in images) == 3
    assert sum(h["succeeded"] for h in every) == 3 * 6  # resize and mail, three hours
    assert {h["run_p50"] for h in images if h["run_count"]} == {3.0}
    page = c.get("/?window=7d&queue=images").text
    assert "last 7d · 3 jobs" in page


@pytest.mark.parametrize(
    "query",
    ["window=30d", "window=", "window=24h&hours=24", "type=" + "x" * 201, "queue=a%00b"],
)
def test_bad_filters_are_refused_on_both(queue: errands.Queue, query: str) -> None:
    c = TestClient(create_app(queue))
    page = c.get(f"/?{query}")
    api = c.get(f"/api/admin/charts?{query}")
    if query == "window=":  # empty means the default, as on every filter
        assert page.status_code == api.status_code == 200
        return
    assert api.status_code == 400, api.text
    assert any(name in api.json()["error"] for name in ("window", "type", "queue", "hours"))
    if "hours" not in query:  # the page takes no JSON-only whitelist, the API does
        assert page.status_code == 400


def test_hostile_names_are_text_and_do_not_fill_the_cache(queue: errands.Queue) -> None:
    history(queue)
    app = create_app(queue)
    c = TestClient(app)
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    html = c.get("/", params={"window": "7d", "type": evil, "queue": evil}).text
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert charts_json(c, "window=7d&type=nope") == charts_json(c, "window=7d&type=nope2")
    cache = app.state.dashboard._cache
    size = len(cache)
    for i in range(50):
        assert c.get("/api/admin/charts", params={"window": "7d", "type": f"t{i}"}).json()
    assert len(cache) == size  # unknown names are computed, never kept
    assert c.get("/api/admin/charts", params={"window": "7d", "type": "resize"}).json()
    assert len(cache) == size + 1  # a type that has jobs is kept a minute


def test_hours_are_cut_in_utc_whatever_the_sessions_time_zone(pg_url: str) -> None:
    """PostgreSQL cuts the hours in SQL: a database whose sessions run at +05:30 (no whole
    hour off UTC) still puts each job in its UTC hour, for every kind of chart."""
    import psycopg

    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET TimeZone = 'Asia/Kolkata'")
        assert conn.execute("SHOW TimeZone").fetchone() is not None
    with errands.Queue(pg_url) as q:
        with psycopg.connect(pg_url) as conn:
            (zone,) = conn.execute("SHOW TimeZone").fetchone() or ("",)
        assert zone == "Asia/Kolkata"
        world = history(q)
        c = TestClient(create_app(q))
        for query in ("window=7d&type=resize", "window=7d", "window=7d&queue=images"):
            week = charts_json(c, query)
            recent = hour_of(week, world["hours"]["recent"])
            assert recent["succeeded"] == (1 if "images" in query else 3 if "type" in query else 6)
            assert all(h["hour"] % HOUR == 0 for h in week)


@pytest.fixture(params=["sqlite", "postgres"])
def bare_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A database errands has not installed into yet (a table prefix chooses its names)."""
    if request.param == "sqlite":
        return str(tmp_path / "app.db")
    url: str = request.getfixturevalue("pg_empty_url")
    return url


def test_a_types_charts_read_the_prefixed_tables(bare_url: str) -> None:
    """With a table prefix (docs/operations.md) the charts' own queries read errands' prefixed
    tables, before and after a prune."""
    q = errands.Queue(bare_url, table_prefix="acme_", retention={"succeeded": 1, "cancelled": 1})
    try:
        world = history(q)
        c = TestClient(create_app(q))
        before = charts_json(c, "window=7d&type=resize")
        assert hour_of(before, world["hours"]["recent"])["run_p95"] == 7.0
        assert q.prune(now=time.time() + 5).total > 0
        assert charts_json(TestClient(create_app(q)), "window=7d&type=resize") == before
    finally:
        q.close()
