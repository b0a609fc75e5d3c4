"""Fresh PostgreSQL databases for tests.

Each test gets its own database, cloned from a template that already holds the current schema
(``CREATE DATABASE … TEMPLATE``, WAL_LOG strategy: ~30 ms, where creating and migrating an empty
one takes ~350 ms). The template's name carries a hash of the migrations, so a schema change
builds a new one. ``migrated=False`` gives an empty database (for migration tests).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import queue
import threading
import uuid
from collections.abc import Callable
from functools import partial

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from errands.backends import sql as errands_sql

_TEMPLATE_LOCK = 0x65727261_6E6474  # advisory lock: one process builds the template


def _with_db(base_url: str, dbname: str) -> str:
    params = conninfo_to_dict(base_url)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


def url_with_db(base_url: str, dbname: str) -> str:
    """A postgresql:// URL for another database on the same server (URLs stay URLs, since
    errands picks its backend by the scheme)."""
    params = conninfo_to_dict(base_url)
    user = params.get("user") or "postgres"
    password = f":{params['password']}" if params.get("password") else ""
    host = params.get("host") or "127.0.0.1"
    port = params.get("port") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{dbname}"


def _template_name() -> str:
    digest = hashlib.sha256()
    for version, script in errands_sql.migrations("postgres"):
        digest.update(f"{version}:{script}".encode())
    return f"errands_tpl_{digest.hexdigest()[:12]}"


def _ensure_template(admin: psycopg.Connection[object], base_url: str) -> str:
    name = _template_name()
    admin.execute("SELECT pg_advisory_lock(%s)", (_TEMPLATE_LOCK,))
    try:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return name
        building = f"{name}_build_{uuid.uuid4().hex[:6]}"
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
        import errands

        with errands.Queue(url_with_db(base_url, building)):
            pass  # migrates
        # Renamed only once complete, so an interrupted build is never used as the template.
        admin.execute(
            sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                sql.Identifier(building), sql.Identifier(name)
            )
        )
        return name
    finally:
        admin.execute("SELECT pg_advisory_unlock(%s)", (_TEMPLATE_LOCK,))


def _create(base_url: str, name: str, template: str) -> None:
    with psycopg.connect(_with_db(base_url, "postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY wal_log").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )


def _drop(base_url: str, name: str) -> None:
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(_with_db(base_url, "postgres"), autocommit=True) as conn,
    ):
        # FORCE: a subprocess a test killed may leave a session behind.
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


def _new_name() -> str:
    return f"errands_test_{os.getpid()}_{uuid.uuid4().hex[:10]}"


class _Spares:
    """Migrated databases made ahead of the tests that take them, and dropped behind them, on
    two threads of their own: a clone and a drop cost the server 0.1-0.6 s each (a drop
    flushes the database's files), which the test would otherwise wait for; on two cores
    that time overlaps the tests' own Python. Every database is still used by one test only.
    What is left at exit (the spares made ahead, the drops not done yet) is dropped then."""

    AHEAD = 2

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.pid = os.getpid()  # a test's forked child inherits the atexit hook, not the pool
        with psycopg.connect(_with_db(base_url, "postgres"), autocommit=True) as admin:
            self.template = _ensure_template(admin, base_url)
        self.ready: queue.Queue[str | Exception] = queue.Queue(maxsize=self.AHEAD)
        self.drops: queue.Queue[str | None] = queue.Queue()
        self.stopping = threading.Event()
        self.made = threading.Thread(target=self._make, name="pg-spares", daemon=True)
        self.dropper = threading.Thread(target=self._drop_all, name="pg-drops", daemon=True)
        self.made.start()
        self.dropper.start()
        atexit.register(self.close)

    def _make(self) -> None:
        while not self.stopping.is_set():
            name = _new_name()
            try:
                _create(self.base_url, name, self.template)
            except Exception as exc:  # handed to the test that takes it
                self.ready.put(exc)
                return
            while True:
                try:
                    self.ready.put(name, timeout=0.5)
                    break
                except queue.Full:
                    if self.stopping.is_set():
                        _drop(self.base_url, name)
                        return

    def _drop_all(self) -> None:
        while (name := self.drops.get()) is not None:
            _drop(self.base_url, name)

    def take(self) -> str:
        got = self.ready.get(timeout=120)
        if isinstance(got, Exception):
            self.ready.put(got)  # the maker has stopped: every later test gets the same reason
            raise RuntimeError(f"could not clone the test template: {got}") from got
        return got

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        self.stopping.set()
        self.made.join(timeout=30)
        while True:
            try:
                got = self.ready.get_nowait()
            except queue.Empty:
                break
            if isinstance(got, str):
                self.drops.put(got)
        self.drops.put(None)
        self.dropper.join(timeout=120)


_spares: dict[str, _Spares] = {}
_spares_lock = threading.Lock()


def fresh_database(base_url: str, *, migrated: bool = True) -> tuple[str, Callable[[], None]]:
    """Create a uniquely named database; returns its URL and a callable that drops it (behind,
    on ``_Spares``' thread; a migrated one is also made ahead)."""
    with _spares_lock:
        spares = _spares.get(base_url) or _spares.setdefault(base_url, _Spares(base_url))
    if migrated:
        name = spares.take()
    else:
        name = _new_name()
        _create(base_url, name, "template0")
    # Dropped behind: a drop waits for a checkpoint, seconds while other tests write.
    return url_with_db(base_url, name), partial(spares.drops.put, name)
