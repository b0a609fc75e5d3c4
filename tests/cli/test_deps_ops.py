"""Operating pipelines (docs/pipelines.md): `errands show` and `errands deps ID` print the graph
around a job, `check` flags a waiting job whose upstreams are all final, the JSON API's job
object has `deps`. Both backends."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

import errands
from errands.cli import main
from errands.web import create_app


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


def _pipeline(db_url: str) -> tuple[int, int, int]:
    with errands.Queue(db_url) as q:
        a = q.enqueue("extract", {"part": 1})
        b = q.enqueue("merge", {}, after=[a])
        c = q.enqueue("report", {}, after=[b], on_upstream_failure="run")
    return a, b, c


def test_deps_and_show_print_the_graph(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, c = _pipeline(db_url)
    code, out = _run(["deps", str(b), "--db", db_url], capsys)
    assert code == 0
    assert f"job {b} (merge): waiting" in out
    assert f"#{a}" in out and "extract" in out and "queued" in out
    assert f"#{c}" in out and "on_upstream_failure=run" in out
    code, out = _run(["deps", str(b), "--db", db_url, "--json"], capsys)
    data = json.loads(out)
    assert data["job"] == {"id": b, "type": "merge", "status": "waiting"}
    assert data["upstream"] == [
        {"id": a, "type": "extract", "status": "queued", "on_upstream_failure": "cancel"}
    ]
    assert [d["id"] for d in data["downstream"]] == [c]
    code, out = _run(["show", str(b), "--db", db_url], capsys)
    assert code == 0 and "Upstream (1)" in out and "Downstream (1)" in out
    code, out = _run(["show", str(b), "--db", db_url, "--json"], capsys)
    assert [d["id"] for d in json.loads(out)["deps"]["upstream"]] == [a]
    code, out = _run(["deps", "999999", "--db", db_url], capsys)
    assert code == 1


def test_check_flags_a_waiting_job_whose_upstreams_are_final(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = _pipeline(db_url)
    code, out = _run(["check", "--db", db_url], capsys)
    assert "release was missed" not in out
    with errands.Queue(db_url) as q:  # a change by hand: the upstream final, its edge open
        with q.backend._write("test") as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"UPDATE jobs SET status = 'cancelled', finished_at = created_at WHERE id = {a}"
            )
    code, out = _run(["check", "--db", db_url], capsys)
    assert code == 1 and "release was missed" in out
    with errands.Queue(db_url) as q:
        report = next(s for s in q.services() if s.name == "deps").run_once(q.clock())
        assert report.closed == 1
        assert q.get(b).status == "cancelled"  # type: ignore[union-attr]
    code, out = _run(["check", "--db", db_url], capsys)
    assert "release was missed" not in out


def test_the_json_api_job_object_has_deps(db_url: str) -> None:
    a, b, c = _pipeline(db_url)
    with errands.Queue(db_url) as q, TestClient(create_app(q)) as client:
        body = client.get(f"/api/admin/jobs/{b}").json()
    assert [d["id"] for d in body["deps"]["upstream"]] == [a]
    assert body["deps"]["downstream"] == [
        {"id": c, "type": "report", "status": "waiting", "on_upstream_failure": "run"}
    ]


def test_enqueue_after_from_the_command_line(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, _ = _pipeline(db_url)
    code, out = _run(["enqueue", "report", "--db", db_url, "--after", f"{a},{a}"], capsys)
    assert code == 0
    new = int(out)
    with errands.Queue(db_url) as q:
        job = q.get(new)
        assert job is not None and job.status == "waiting"
        assert [j.id for j in q.upstream(new)] == [a]
    code, _ = _run(["enqueue", "report", "--db", db_url, "--after", "a,b"], capsys)
    assert code == 2
    code, _ = _run(["enqueue", "report", "--db", db_url, "--after", "999999"], capsys)
    assert code == 1  # no such job: refused, nothing written
