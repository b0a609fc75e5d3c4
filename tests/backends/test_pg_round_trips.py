"""PostgreSQL producers' round trips, counted on the wire: a proxy between errands and the
server reads every message the client sends. A round trip is a message the client must wait
on the server for: a Sync (the end of an extended-protocol exchange) or a simple Query.

The one-by-one enqueue is one statement in one round trip (the job, its ENQUEUED event and
the wake-up: own.sql insert_job_recorded, no BEGIN nor COMMIT), prepared after psycopg's
prepare threshold (Bind without Parse); enqueue_many's round trips do not grow with the
number of jobs (COPY). What those writes promise is checked too: every job and event is
there, a held unique key returns its job, an idle worker is woken. And the worker's fair
claim writes what it chose in one statement (own.sql claim_ids_recorded)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

import errands
from errands.backends.base import ClaimRequest
from helpers.support import sql_rows

WARM = 6  # psycopg prepares a statement on its 6th execution (prepare_threshold=5)


class WireCounter:
    """A TCP proxy to the PostgreSQL server that counts the client's messages by type while
    ``counting`` is set. Needs sslmode=disable (the messages must be readable)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.sent: collections.Counter[str] = collections.Counter()
        self.counting = False
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        self._server.settimeout(0.1)  # so close() is noticed
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            for target, args in ((self._client_side, (client, server)), (_pump, (server, client))):
                t = threading.Thread(target=target, args=args, daemon=True)
                self._threads.append(t)
                t.start()

    def _client_side(self, client: socket.socket, server: socket.socket) -> None:
        """Forward the client's bytes, parsing its messages: the startup packet (no type
        byte), then type + length-prefixed messages."""
        buf = b""
        started = False
        try:
            while chunk := client.recv(65536):
                server.sendall(chunk)
                buf += chunk
                while True:
                    if not started:
                        if len(buf) < 4:
                            break
                        (size,) = struct.unpack("!I", buf[:4])
                        if len(buf) < size:
                            break
                        buf, started = buf[size:], True
                        continue
                    if len(buf) < 5:
                        break
                    (size,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < 1 + size:
                        break
                    kind, buf = chr(buf[0]), buf[1 + size :]
                    if self.counting:
                        with self._lock:
                            self.sent[kind] += 1
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_WR)

    @contextlib.contextmanager
    def count(self) -> Iterator[collections.Counter[str]]:
        """The messages sent inside the block, by type (Counter of one-letter codes)."""
        with self._lock:
            self.sent = collections.Counter()
        self.counting = True
        try:
            yield self.sent
        finally:
            self.counting = False

    def close(self) -> None:
        self._closed = True
        self._server.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=5)
        for s in self._sockets:
            s.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def ddl(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement.encode())


def round_trips(sent: collections.Counter[str]) -> int:
    return sent["S"] + sent["Q"]


@pytest.fixture
def wire(pg_url: str) -> Iterator[tuple[WireCounter, str]]:
    parts = urlsplit(pg_url)
    proxy = WireCounter(parts.hostname or "127.0.0.1", parts.port or 5432)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    netloc_s = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
    query = "&".join(filter(None, [parts.query, "sslmode=disable", "gssencmode=disable"]))
    try:
        yield proxy, urlunsplit((parts.scheme, netloc_s, parts.path, query, parts.fragment))
    finally:
        proxy.close()


def test_one_by_one_enqueue_is_one_prepared_statement_in_one_round_trip(
    wire: tuple[WireCounter, str], pg_url: str
) -> None:
    proxy, url = wire
    with errands.Queue(url) as q:
        for i in range(WARM):
            q.enqueue("t", {"warm": i})
        with proxy.count() as sent:
            job_id = q.enqueue("t", {"n": 1})
        assert round_trips(sent) == 1, dict(sent)
        assert sent["Q"] == 0, "no BEGIN, no COMMIT: the statement is its own transaction"
        assert sent["P"] == 0 and sent["B"] == 1, f"not prepared: {dict(sent)}"
    # What the one statement promised: the job, committed, with its ENQUEUED event.
    assert sql_rows(pg_url, f"SELECT status FROM jobs WHERE id = {job_id}") == [("queued",)]
    events = sql_rows(pg_url, f"SELECT event, actor FROM job_events WHERE job_id = {job_id}")
    assert events == [("ENQUEUED", "api")]


def test_enqueue_async_is_one_round_trip_too(wire: tuple[WireCounter, str], pg_url: str) -> None:
    proxy, url = wire

    async def run() -> tuple[int, collections.Counter[str]]:
        async with errands.Queue(url) as q:
            for i in range(WARM):
                await q.enqueue_async("t", {"warm": i})
            with proxy.count() as sent:
                job_id = await q.enqueue_async("t", {"n": 1})
            return job_id, sent

    job_id, sent = asyncio.run(run())
    assert round_trips(sent) == 1 and sent["Q"] == 0, dict(sent)
    events = sql_rows(pg_url, f"SELECT event FROM job_events WHERE job_id = {job_id}")
    assert events == [("ENQUEUED",)]


def test_a_held_unique_key_still_returns_the_holder_outside_a_transaction(
    wire: tuple[WireCounter, str], pg_url: str
) -> None:
    """Without BEGIN the key check runs after the insert found the key held, in its own
    statement: the holder's id comes back and no second job nor event is written."""
    _, url = wire
    with errands.Queue(url) as q:
        first = q.enqueue("t", {"n": 1}, unique_key="k")
        again = q.enqueue("t", {"n": 2}, unique_key="k")
    assert again == first
    assert sql_rows(pg_url, "SELECT count(*) FROM jobs") == [(1,)]
    assert sql_rows(pg_url, "SELECT count(*) FROM job_events") == [(1,)]


def test_a_refused_single_enqueue_writes_nothing(
    wire: tuple[WireCounter, str], pg_url: str
) -> None:
    """The statement is its own transaction: when the server refuses its event row (a
    CHECK constraint added for the test), the job row goes too — no job without its
    ENQUEUED event — and the Queue keeps working once the constraint is gone."""
    _, url = wire
    refuse = "ALTER TABLE job_events ADD CONSTRAINT refuse_all CHECK (job_id < 0) NOT VALID"
    with errands.Queue(url) as q:
        q.enqueue("t", {"warm": 1})
        ddl(pg_url, refuse)
        with pytest.raises(errands.DatabaseError, match="refuse_all"):
            q.enqueue("t", {"n": 1})
        ddl(pg_url, "ALTER TABLE job_events DROP CONSTRAINT refuse_all")
        ok = q.enqueue("t", {"n": 2})
    assert sql_rows(pg_url, "SELECT count(*) FROM jobs") == [(2,)]
    assert sql_rows(pg_url, "SELECT count(*) FROM job_events") == [(2,)]
    assert sql_rows(pg_url, f"SELECT count(*) FROM job_events WHERE job_id = {ok}") == [(1,)]


def test_enqueue_many_round_trips_do_not_grow_with_the_jobs(
    wire: tuple[WireCounter, str], pg_url: str
) -> None:
    proxy, url = wire
    trips = {}
    with errands.Queue(url) as q:
        q.enqueue_many([("t", {"warm": i}) for i in range(100)])
        for n in (100, 5000):
            with proxy.count() as sent:
                ids = q.enqueue_many([("t", {"i": i}) for i in range(n)])
            trips[n] = round_trips(sent)
            assert len(ids) == n == len(set(ids))
            rows = sql_rows(
                pg_url,
                "SELECT count(*) FROM jobs j JOIN job_events e ON e.job_id = j.id "
                f"WHERE e.event = 'ENQUEUED' AND j.id IN ({','.join(map(str, ids))})",
            )
            assert rows == [(n,)]
    assert trips[100] == trips[5000] <= 6, trips


def test_the_fair_claim_writes_what_it_chose_in_one_round_trip(
    wire: tuple[WireCounter, str], pg_url: str
) -> None:
    """Once the turns have chosen the jobs, one statement claims them and writes their
    attempt rows, their CLAIMED events and the values' tags and the key's clock (it was six
    round trips): a fair claim is its reads, that write, and the commit."""
    proxy, url = wire
    with errands.Queue(url) as q:

        @q.task(fair="tenant")
        def work(tenant: str) -> None: ...

        q.enqueue_many([("work", {"tenant": f"t{i % 3}"}) for i in range(9)])
        key, spec = work.options.fair_key(), work.options.fair
        assert key is not None and spec is not None
        request = ClaimRequest("w1", ["work"], None, 6, 60.0, True, {key: spec.spec()})
        with proxy.count() as sent:
            got = q.backend.claim(request, q.clock())
    # BEGIN; the groups' scan, the stored limits, the stored turns, the probe of the values,
    # the unlimited jobs beside them; the one write; COMMIT.
    assert round_trips(sent) == 8, dict(sent)
    ids = ",".join(str(j.id) for j in got)
    tenants = sql_rows(pg_url, f"SELECT payload->>'tenant' FROM jobs WHERE id IN ({ids})")
    assert sorted(t for (t,) in tenants) == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert sql_rows(pg_url, "SELECT count(*) FROM job_attempts") == [(6,)]
    assert sql_rows(pg_url, "SELECT count(*) FROM job_events WHERE event = 'CLAIMED'") == [(6,)]
    # Two starts each from the clock at 0: each tag at 2, the clock at the last start, 1.
    turns = sql_rows(pg_url, "SELECT value, tag FROM fair_turns ORDER BY value")
    assert turns == [("t0", 2.0), ("t1", 2.0), ("t2", 2.0)]
    assert sql_rows(pg_url, "SELECT vtime FROM fair_clocks") == [(1.0,)]
