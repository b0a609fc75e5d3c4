"""One filter vocabulary (issue #25): every page and its JSON twin take the same filters with
the same names, and the same query string gives the same rows on both — the job list and
``/api/admin/jobs``, Failures and ``/api/admin/errors``, the overview's charts and
``/api/admin/charts`` — on both backends. ``since``, the errors API's older name for
``window``, is still taken (scripts use it) on the page too; both at once with different values
is refused.
"""

from __future__ import annotations

import re
import time
from html import unescape
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import boards, create_app
from errands.web.params import API_QUERY
from helpers.ops import run_job
from helpers.web import populate

PAIRS = {"/jobs": "api_jobs", "/failures": "api_errors", "/": "api_charts"}


def page_job_ids(html: str) -> list[int]:
    body = html.split('<table class="jobs', 1)[-1]
    return [int(i) for i in re.findall(r'href="[^"]*/jobs/(\d+)">#', body)]


def page_groups(html: str) -> list[tuple[str, str, int]]:
    table = re.search(r'<table class="failures">(.*?)</table>', html, re.S)
    if table is None:
        return []
    rows = re.findall(
        r'<td class="num">([\d,]+)</td>\s*<td class="error"><a href="([^"]+)"', table.group(1)
    )
    out = []
    for count, link in rows:
        query = dict(re.findall(r"[?&](\w+)=([^&]*)", unescape(link)))
        out.append(
            (query["error_code"].replace("%3A", ":"), query["type"], int(count.replace(",", "")))
        )
    return out


def failing(q: errands.Queue, groups: int) -> None:
    """``groups`` failure groups of 1..groups jobs (type ``t00``… one code), and a cancel."""
    now = time.time()
    for i in range(groups):
        for _ in range(i + 1):
            run_job(
                q,
                f"t{i:02d}",
                run_at=now - 600,
                started=now - 590,
                finished=now - 580,
                outcome="failed",
                error_code="APP:BROKEN",
            )
    q.cancel(q.enqueue("mail", {}, delay=3600), actor="ops")


def test_each_twin_takes_the_filters_its_page_takes() -> None:
    assert API_QUERY["api_jobs"] >= {"status", "type", "queue", "error_code", "q", "view"}
    assert API_QUERY["api_errors"] == {"window", "since", "page", "top"}
    assert API_QUERY["api_charts"] == {"window", "type", "queue"}
    assert set(PAIRS.values()) <= set(API_QUERY)


@pytest.mark.parametrize(
    "query",
    [
        "status=failed",
        "status=failed&type=charge",
        "status=succeeded&limit=2",
        "queue=mail",
        "type=resize&limit=3",
        "q=card",
        "view=scheduled",
        "view=dead&type=charge",
    ],
)
def test_the_job_list_and_its_twin_give_the_same_rows(queue: errands.Queue, query: str) -> None:
    populate(queue)
    c = TestClient(create_app(queue))
    api = c.get(f"/api/admin/jobs?{query}")
    assert api.status_code == 200, api.text
    ids = [j["id"] for j in api.json()["jobs"]]
    assert ids, query  # each query matches something: an empty list proves nothing
    assert page_job_ids(c.get(f"/jobs?{query}").text) == ids


def test_failures_and_their_twin_give_the_same_rows(
    queue: errands.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing(queue, 7)
    monkeypatch.setattr(boards, "FAILURE_PAGE", 3)  # 7 groups: three pages
    c = TestClient(create_app(queue))
    seen = []
    for query in ("window=7d", "window=7d&page=2", "window=1h&page=3", "window=24h&page=99"):
        body = c.get(f"/api/admin/errors?{query}").json()
        rows = [(e["error_code"], e["type"], e["count"]) for e in body["errors"]]
        assert rows and page_groups(c.get(f"/failures?{query}").text) == rows, query
        assert body["total_groups"] == 7 and body["pages"] == 3 and body["cancelled"] == 1
        seen += rows
    # No cancellation among them, every group once over the three pages.
    assert not any(code.startswith("CANCELLED:") for code, _, _ in seen)
    assert len({r[1] for r in seen[:7]}) == 7
    assert seen[0] == ("APP:BROKEN", "t06", 7)  # the largest first


def test_since_is_still_taken_as_windows_older_name(queue: errands.Queue) -> None:
    failing(queue, 2)
    c = TestClient(create_app(queue))
    api = c.get("/api/admin/errors?since=1h").json()
    assert api == c.get("/api/admin/errors?window=1h").json()
    assert api["window"] == "1h" and api["since_seconds"] == 3600
    assert page_groups(c.get("/failures?since=1h").text) == [
        (e["error_code"], e["type"], e["count"]) for e in api["errors"]
    ]
    assert c.get("/api/admin/errors?since=1h&window=1h").status_code == 200  # the same: fine
    for path in ("/api/admin/errors", "/failures"):
        r = c.get(f"{path}?since=1h&window=7d")
        assert r.status_code == 400, path
        assert "window" in r.text and "since" in r.text
    # Any duration the API took before is taken by both now, up to 90 days.
    for window in ("90m", "3d"):
        assert c.get(f"/failures?window={window}").status_code == 200
        assert c.get(f"/api/admin/errors?window={window}").status_code == 200
    for window in ("91d", "forever", "-1h"):
        assert c.get(f"/failures?window={window}").status_code == 400
        assert c.get(f"/api/admin/errors?window={window}").status_code == 400
    # top (docs/dashboard.md: errors?top=N, the N largest): the size of a page, on both.
    assert len(c.get("/api/admin/errors?top=1").json()["errors"]) == 1


def test_top_is_the_page_size_on_both(queue: errands.Queue) -> None:
    failing(queue, 7)
    c = TestClient(create_app(queue))
    top3 = c.get("/api/admin/errors?top=3").json()
    assert [e["type"] for e in top3["errors"]] == ["t06", "t05", "t04"]  # the 3 largest
    assert top3["pages"] == 3 and top3["total_groups"] == 7
    second = c.get("/api/admin/errors?top=3&page=2").json()
    assert [e["type"] for e in second["errors"]] == ["t03", "t02", "t01"]
    html = c.get("/failures?top=3&page=2").text
    assert [g[1] for g in page_groups(html)] == ["t03", "t02", "t01"]
    links = {unescape(u) for u in re.findall(r'href="([^"]+)"', html)}
    assert "http://testserver/failures?window=24h&top=3&page=3" in links  # the pager keeps it
    assert len(c.get("/api/admin/errors?top=100").json()["errors"]) == 7
    assert c.get("/api/admin/errors?top=101").status_code == 400


def test_the_overview_and_its_twin_give_the_same_totals(queue: errands.Queue) -> None:
    populate(queue)
    c = TestClient(create_app(queue))
    for query in ("window=24h", "window=7d&type=charge", "window=24h&queue=mail", "type=resize"):
        hours: list[dict[str, Any]] = c.get(f"/api/admin/charts?{query}").json()["hours"]
        finished = sum(h["succeeded"] + h["failed"] + h["cancelled"] for h in hours)
        html = c.get(f"/?{query}").text
        match = re.search(r"last (\w+) · ([\d,]+) jobs", html)
        assert match, query
        assert int(match.group(2).replace(",", "")) == finished, query
    assert sum(h["failed"] for h in c.get("/api/admin/charts?type=charge").json()["hours"]) == 3


def test_the_docs_list_each_json_reads_parameters_as_the_code_takes_them() -> None:
    """docs/dashboard.md's JSON API table: every read the app serves under /api/admin, with
    exactly the query parameters ``API_QUERY`` lets it take."""
    from pathlib import Path

    from errands.web import ROUTES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "dashboard.md").read_text()
    listed = {
        path: set(re.findall(r"([a-z_]+)=", query or ""))
        for path, query in re.findall(r"^\| `GET (/api/admin/[a-z/{}_]+)(?:\?([^`]*))?`", doc, re.M)
    }
    for ep in ROUTES:
        if ep.api and ep.path.startswith("/api/admin/") and "GET" in ep.methods:
            path = re.sub(
                r"\{(\w+)(:int)?\}",
                lambda m: "{id}" if m.group(1) == "job_id" else "{" + m.group(1) + "}",
                ep.path,
            )
            assert path in listed, f"docs/dashboard.md does not list GET {path}"
            assert listed[path] == set(API_QUERY.get(ep.name, ())) - {"since"}, path
