"""The SQLite backend (the default, standard library only).

Every verb is the shared one (``sqlbase.py``: the nouns) over the named queries in
``sql/sqlite/``; this module supplies the hooks of ``host.SQLHost``. Connections are per
thread (sqlite3 objects must not be shared while in use). Every write is one ``BEGIN
IMMEDIATE`` transaction: taking the write lock up front means a transaction never fails
half-way with SQLITE_BUSY on lock upgrade, and the busy timeout applies at BEGIN.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..core import faults
from ..core.settings import Settings
from ..errors import (
    ConfigurationError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseReplacedError,
)
from . import forks, prefix, sql, sqlite_text, sqlite_wakeup
from .base import ClaimedJob, ClaimRequest, Outcome
from .host import WORK, Conn
from .sqlbase import SQLBackend
from .user_tx import SQLiteOwnTx

MIN_SQLITE = (3, 35, 0)  # RETURNING
SCHEMA_VERSION = len(sql.migrations("sqlite"))

_NETWORK_FS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "9p",
    "afs",
    "ceph",
    "glusterfs",
    "fuse.sshfs",
    "lustre",
    "gpfs",
    "davfs",
}


def path_from_url(url: str) -> str:
    """``app.db``, ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` → a file path
    (a ``?table_prefix=…`` is not part of it)."""
    url = prefix.split_url(url)[0]
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if not rest.startswith("/"):
            raise ConfigurationError(
                f"cannot read {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        path = rest[1:]
    else:
        path = url
    if path in ("", ":memory:") or path.startswith("file::memory:"):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared by workers and would lose every job "
            "on exit; give a file path such as 'app.db'"
        )
    return path


def translate(exc: sqlite3.Error, path: str) -> DatabaseError:
    """Turn sqlite3's terse errors into one line that says what to do."""
    msg = str(exc)
    low = msg.lower()
    if "readonly" in low or "read-only" in low:
        text = f"{path} is read-only ({msg}); make the file and its directory writable"
    elif ("malformed" in low or "not a database" in low) and not _looks_like_sqlite(path):
        text = (
            f"{path} is not an SQLite database ({msg}); point the Queue at your errands "
            "database file — errands will not write to this one"
        )
    elif "malformed" in low or "not a database" in low:
        text = (
            f"{path} is a corrupt SQLite database ({msg}); restore it from a backup "
            "(see docs/operations.md) — errands will not write to it"
        )
    elif "disk is full" in low or "database or disk is full" in low:
        text = (
            f"the disk holding {path} is full ({msg}); free space and retry — nothing was written"
        )
    elif "unable to open" in low and os.path.isdir(path):
        text = f"{path} is a directory, not a database file; give the path of a file, e.g. app.db"
    elif "unable to open" in low:
        text = f"cannot open {path} ({msg}); check the directory exists and is writable"
    elif "locked" in low or "busy" in low:
        text = (
            f"{path} stayed locked by another connection past the busy timeout ({msg}); "
            "a long transaction elsewhere holds the write lock — shorten it or raise busy_timeout"
        )
        return DatabaseBusyError(text)
    else:
        text = f"database error on {path}: {msg}"
    return DatabaseError(text)


def _looks_like_sqlite(path: str) -> bool:
    """An SQLite file starts with this header; a damaged database still does, a text file or
    another format does not — which tells "wrong file" from "corrupt" apart."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding ``path`` (from /proc/mounts), or None if unknown."""
    real = os.path.realpath(path)
    best, best_type = "", None
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) >= 3 and (
                    real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")
                ):
                    if len(parts[1]) >= len(best):
                        best, best_type = parts[1], parts[2]
    except OSError:
        return None  # not Linux: nothing to check against
    return best_type


def _is_network_fs(path: str) -> str | None:
    fs = filesystem_type(os.path.dirname(os.path.abspath(path)) or ".")
    return fs if fs in _NETWORK_FS else None


class SQLiteBackend(SQLiteOwnTx, SQLBackend):
    dialect = "sqlite"
    q = sql.queries("sqlite")
    schema_target = SCHEMA_VERSION
    other_jobs_table_hint = (
        "give errands a file of its own (e.g. Queue('jobs.db')) or use PostgreSQL"
    )
    # One writer at a time and an fsync per commit: concurrent producers of one Queue share
    # a commit (client/grouping.py) instead of queueing on the file lock for one each.
    group_commit = True
    # cursor.lastrowid and rowcount, and AUTOINCREMENT ids under the write lock (jobs.py).
    counted_inserts = True

    def __init__(self, url: str, settings: Settings, table_prefix: str | None = None) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise DatabaseError(
                f"SQLite {sqlite3.sqlite_version} is too old: errands needs 3.35 or newer "
                "(for RETURNING); upgrade Python or install pysqlite3 with a newer SQLite"
            )
        # Resolved once, now: a handler's os.chdir() must not make a relative path name
        # another file (or none) later on.
        self.path = self.where = os.path.abspath(path_from_url(url))
        self.settings = settings
        fs = _is_network_fs(self.path)
        if fs and not settings.allow_network_filesystem:
            raise ConfigurationError(
                f"{self.path} is on a network filesystem ({fs}); SQLite's WAL mode needs shared "
                "memory on one host and can corrupt there. Use a local disk or PostgreSQL, or "
                "pass allow_network_filesystem=True if only one host ever opens it"
            )
        self._local = threading.local()
        self._wakes = threading.local()  # .pending: the wake-ups a write owes at its commit
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened
        self._all: list[_Held] = []
        self._lock = threading.Lock()
        self._generation = forks.generation  # see _after_fork
        self._notifier = sqlite_wakeup.Notifier(self.path)
        self._writer = threading.RLock()  # see _write
        self._use_prefix(table_prefix)

    def _migrations_tables(self) -> list[str]:
        # Read-only, like _preflight: nothing of an application's file changes (not even
        # the switch to WAL) before errands knows which tables are its own.
        try:
            return prefix.read_only_names(self.path, self.q["installations"])
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    # -- connections -----------------------------------------------------------------------

    def connect(self) -> sqlite3.Connection:
        """A new, fully configured connection (the caller owns it)."""
        # Once a file is open, a new connection (a new thread's) must not open whatever now
        # sits at the path — nor create an empty file where a deleted one was.
        self.check_identity()
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.settings.busy_timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.settings.busy_timeout * 1000)}")
            self._set_wal(conn)
            sync = "FULL" if self.settings.durability == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {sync}")
            conn.execute("PRAGMA foreign_keys = ON")
            if conn.execute("PRAGMA foreign_keys").fetchone()[0] != 1:
                raise DatabaseError(
                    "this SQLite build cannot enforce foreign keys; errands needs them"
                )
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, self.path) from exc
        except BaseException:
            conn.close()
            raise
        if self._identity is None:
            with contextlib.suppress(OSError):
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)
        return conn

    def _set_wal(self, conn: sqlite3.Connection) -> None:
        # Switching to WAL needs a moment of exclusive access; several processes opening a new
        # file together can collide here, so retry within the busy timeout.
        deadline = time.monotonic() + self.settings.busy_timeout
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            raise DatabaseError(
                f"{self.path} could not be put in WAL mode (got {mode!r}); errands needs WAL "
                "for concurrent readers and writers — check the filesystem supports it"
            )

    def _held(self) -> _Held:
        held: _Held | None = getattr(self._local, "held", None)
        if held is None or forks.generation != self._generation:
            if forks.generation != self._generation:
                self._after_fork()
            held = _Held(self.connect())
            self._local.held = held
            with self._lock:
                self._all.append(held)
        return held

    # Each use of a connection holds its _Held lock (and counts its depth): close() from
    # another thread never closes a connection while a statement runs on it (sqlite3 would
    # crash the process); it leaves it to be closed by its user, as soon as the use ends.
    # Written out in each context manager rather than nested in one more: this is the path
    # of every enqueue and claim.

    @contextlib.contextmanager
    def _write(self, name: str) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE … COMMIT; fault points just before and after the commit; the
        wake-ups the write owes (``_woke``) are sent once it has committed. The writes of
        one process queue on ``_writer`` (re-entrant: a step may write inside a step's
        transaction): the file has one writer anyway, and a lock hands it over at once where
        the busy handler polls in sleeps of 1, 2, 5… ms (a worker's outcomes meeting its
        handlers' step records)."""
        held = self._held()
        writer = self._writer  # after _held(): a forked child's own
        if not writer.acquire(timeout=self.settings.busy_timeout):
            # As long as the busy handler would have waited: a step's own transaction
            # (ctx.step(connection=…)) holds it while the step runs.
            raise translate(sqlite3.OperationalError("database is locked"), self.path)
        wakes = self._wakes
        outer = getattr(wakes, "pending", None)
        pending: set[bytes] = set()
        wakes.pending = pending
        try:
            with held.lock:
                held.depth += 1
                try:
                    conn = held.conn
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                    except sqlite3.Error as exc:
                        raise translate(exc, self.path) from exc
                    try:
                        yield conn
                        faults.point(f"{name}.before_commit")
                        conn.execute("COMMIT")
                    except BaseException as exc:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        if isinstance(exc, sqlite3.Error):
                            raise translate(exc, self.path) from exc
                        raise
                finally:
                    held.depth -= 1
        finally:
            writer.release()
            wakes.pending = outer
        for signal in pending:
            self._notifier.send(signal)
        if held.doomed and not held.depth:
            held.close()
        faults.point(f"{name}.after_commit")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # Autocommit reads: each statement sees the latest committed snapshot.
        held = self._held()
        with held.lock:
            held.depth += 1
            try:
                yield held.conn
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc
            finally:
                held.depth -= 1
        if held.doomed and not held.depth:
            held.close()

    @contextlib.contextmanager
    def _read_rows(self) -> Iterator[sqlite3.Connection]:
        """Like ``_read``, but text that is not valid UTF-8 (a lone surrogate an older
        errands stored) is decoded with U+FFFD instead of failing the whole listing. Only
        these reads pay for decoding in Python; the worker's never do."""
        held = self._held()
        with held.lock:
            held.depth += 1
            conn = held.conn
            conn.text_factory = sqlite_text.lenient_text
            try:
                yield conn
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc
            finally:
                conn.text_factory = str
                held.depth -= 1
        if held.doomed and not held.depth:
            held.close()

    def close(self) -> None:
        """Close every thread's connection — at once if idle, else when its use ends."""
        if forks.generation != self._generation:
            self._after_fork()  # a forked child: the parent's connections are not ours
        with self._lock:
            held, self._all = self._all, []
            self._local = threading.local()
        for h in held:
            h.doomed = True
            if h.lock.acquire(blocking=False):
                try:
                    if not h.depth:
                        h.close()
                finally:
                    h.lock.release()
        self._identity = None  # nothing open any more: the next connection may meet a new file
        self._notifier.close()

    def _after_fork(self) -> None:
        """In a process forked from the one that opened them, the inherited connections are
        the parent's: never used nor closed here (either would corrupt the parent's view of
        the file). They are forgotten; this process opens its own."""
        with self._lock:
            self._all = []
            self._local = threading.local()
            self._generation = forks.generation
        self._notifier = sqlite_wakeup.Notifier(self.path)
        self._writer = threading.RLock()  # a thread of the parent's may have held it

    # -- schema ----------------------------------------------------------------------------

    def _run_script(self, conn: Any, script: str) -> None:
        for statement in _statements(script):
            # SQLite has no ADD COLUMN IF NOT EXISTS: a column already there is skipped, so a
            # script applied again over a migrated database (a test re-running the jobs
            # rebuild of 0009 and what follows) does what PostgreSQL's IF NOT EXISTS does.
            added = _ADD_COLUMN.match(statement)
            if added is not None:
                rows = conn.execute(self.q["table_columns"], {"table": added[1]}).fetchall()
                if any(r[0] == added[2] for r in rows):
                    continue
            conn.execute(statement)

    def migrate(self) -> None:
        self._preflight()
        # A CHECK change is a table rebuild on SQLite (migration 0009): with foreign keys on,
        # dropping the old jobs table would cascade-delete every attempt and event. The
        # setting cannot change inside a transaction, so this connection migrates with it
        # off (the rebuild copies every id, so nothing can dangle) and turns it back on.
        conn = self._held().conn  # this thread's, which migrate()'s writes use too
        conn.execute("PRAGMA foreign_keys = OFF")
        try:
            super().migrate()
        finally:
            conn.execute("PRAGMA foreign_keys = ON")

    def _preflight(self) -> None:
        """Refuse a file errands cannot use before anything is changed in it — before even
        the switch to WAL, which rewrites the header: a plain connection with no PRAGMA
        writes, reads only. The check in migrate()'s transaction stays for a file created
        by another process in between."""
        if not os.path.exists(self.path):
            return  # a new file: nothing of the application's to protect
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.settings.busy_timeout, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        try:
            # Both looks in one read transaction, so they see one snapshot: taken apart,
            # another process's migration could commit between them — no migrations table at
            # the first look, all of errands' tables at the second — and errands' own tables
            # would be refused as the application's. Closing rolls the read back.
            conn.execute("BEGIN")
            if conn.execute(self.q["schema_table_exists"]).fetchone() is None:
                self._refuse_conflicts(conn)
            else:
                self._refuse_newer(self._version(conn))
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        finally:
            conn.close()

    def check_identity(self) -> None:
        """Raise DatabaseReplacedError if the path no longer names the file errands opened
        (deleted, or another file renamed over it). Open connections keep writing to the old
        inode, where nobody else will ever read it."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DatabaseReplacedError(
                f"{self.path} was deleted while errands had it open; its jobs are gone with "
                "it — restore the file (or start afresh) and restart the worker"
            ) from None
        except OSError:
            return  # unreadable for a moment (permissions, NFS hiccup): look again next time
        if (st.st_dev, st.st_ino) != self._identity:
            raise DatabaseReplacedError(
                f"{self.path} was replaced by another file while errands had it open; "
                "restart the worker to use the new file (jobs recorded since the swap went "
                "to the old one)"
            )

    # -- dialect hooks (host.SQLHost) -----------------------------------------------------

    @contextlib.contextmanager
    def _user_conn(self, connection: Any) -> Iterator[sqlite3.Connection]:
        self._check_user_connection(connection)
        wakes = self._wakes
        outer = getattr(wakes, "pending", None)
        pending: set[bytes] = set()
        wakes.pending = pending
        try:
            yield connection
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        finally:
            wakes.pending = outer
        if pending:  # the application commits later: listeners look for it (PENDING)
            self._notifier.send(sqlite_wakeup.PENDING)

    def _check_user_connection(self, connection: Any) -> None:
        if not isinstance(connection, sqlite3.Connection):
            raise ConfigurationError(
                f"connection= must be a sqlite3.Connection to {self.path} for this Queue, "
                f"got {type(connection).__name__}"
            )
        if getattr(connection, "autocommit", False) is True or (
            connection.isolation_level is None and not connection.in_transaction
        ):
            raise ConfigurationError(
                "connection= is in autocommit mode with no open transaction, so the job would "
                "commit on its own; run BEGIN on it first (or use the default isolation_level)"
            )
        rows = connection.execute("PRAGMA database_list").fetchall()
        main = next((r[2] for r in rows if r[1] == "main"), "")
        if os.path.realpath(main) != os.path.realpath(self.path):
            raise ConfigurationError(
                f"connection= is open on {main or 'an in-memory database'}, not on this Queue's "
                f"{self.path}; enqueue in a transaction on the same file"
            )

    def _list(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def _epoch(self, value: Any) -> float | None:
        return None if value is None else float(value)

    @contextlib.contextmanager
    def _no_wait(self, conn: Conn, on: bool) -> Iterator[None]:
        if not on:
            yield
            return
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.settings.busy_timeout * 1000)}")

    def _wal_bytes(self) -> int | None:
        try:
            return os.path.getsize(self.path + "-wal")
        except OSError:
            return 0  # no WAL file: nothing waiting to be checkpointed

    # -- wake-up (see sqlite_wakeup.py): one datagram to the listeners after each commit ---------

    def listen(
        self, on_change: Callable[[], None], *, completions: bool = False
    ) -> sqlite_wakeup.DatagramListener | sqlite_wakeup.PollingListener:
        return sqlite_wakeup.listen(self, on_change, completions=completions)

    def _woke_step(self, kind: str, job_ids: Sequence[int] = ()) -> None:
        # Kept until the write commits (_write sends it after COMMIT, _user_conn when the
        # application's transaction is handed back); outside a write, sent at once.
        signal = sqlite_wakeup.JOBS if kind == WORK else sqlite_wakeup.DONE
        pending: set[bytes] | None = getattr(self._wakes, "pending", None)
        if pending is None:
            self._notifier.send(signal)
        else:
            pending.add(signal)

    # A group stored as text that is not UTF-8 (by an older version) must not stop every
    # claim: the claim verbs mend such rows and claim again (sqlite_text.py).

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        request: ClaimRequest,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
        *,
        recorded: list[Outcome] | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]:
        verb = functools.partial(super().finish_and_claim, recorded=recorded)
        return sqlite_text.mending(self, verb, outcomes, worker_id, request, now, held)

    def claim(self, request: ClaimRequest, now: float) -> list[ClaimedJob]:
        return sqlite_text.mending(self, super().claim, request, now)

    def listen_finished(
        self, on_finish: Callable[[frozenset[int] | None], None]
    ) -> sqlite_wakeup.DatagramListener | sqlite_wakeup.PollingListener:
        # Woken by recorded outcomes too (completions); which jobs finished, a data_version
        # change cannot say, so waiters re-read the jobs they wait for.
        return sqlite_wakeup.listen(self, lambda: on_finish(None), completions=True)


class _Held:
    """One thread's connection, with the lock its uses hold (``_using``) so ``close()``
    from another thread can tell whether it is idle."""

    __slots__ = ("closed", "conn", "depth", "doomed", "lock")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.RLock()
        self.depth = 0  # nested uses by the owning thread
        self.doomed = False  # close() was called: close once idle
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                with contextlib.suppress(sqlite3.Error):
                    self.conn.close()


_ADD_COLUMN = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)\s", re.IGNORECASE)


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (none of ours contain ';' inside literals);
    a trigger's BEGIN … END holds several, so pieces join until SQLite calls them complete."""
    body = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    out, pending = [], ""
    for piece in body.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending.strip())
            pending = ""
    return out
