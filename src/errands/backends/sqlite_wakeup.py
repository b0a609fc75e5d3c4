"""Cross-process wake-up for SQLite on one host, without polling.

SQLite has no LISTEN/NOTIFY, so errands brings its own: every listening process (a worker, or a
Queue waiting for completions) binds a Unix-domain datagram socket in Linux's abstract
namespace, under a name derived from the database file's identity (device and inode)::

    \\0errands-wake/<key>/<role>/<pid>-<random>

After an errands write commits, the writing process sends one byte to each such socket. It
finds them in ``/proc/net/unix`` (the kernel's list of bound sockets): no registry to keep, no
files beside the database, and nothing left behind when a process is killed — an abstract
socket vanishes with its process. The list is cached for ``REFRESH`` seconds, and refreshed
early when a send finds a peer gone, so a send costs one ``sendto`` per peer (~10 µs).

A datagram is only a hint. The listener confirms it with ``PRAGMA data_version`` (which changes
whenever another connection commits) before waking anyone, so a stray or forged datagram costs
a pragma, never a claim. And since the application's own writes to the file send nothing, they
cannot cause a wake-up storm: they are noticed only by the slow ``FALLBACK`` check of
``data_version``, at most a few times a second, which also catches jobs written by plain SQL.

A transactional enqueue (``connection=``) commits when the application says so, so the Queue
sends ``PENDING`` instead; a listener that hears it checks ``data_version`` on a short,
backing-off schedule for ``PENDING_WINDOW`` seconds, so the commit is seen within milliseconds.

Where abstract sockets or ``/proc/net/unix`` do not exist (macOS, Windows), listeners fall back
to polling ``data_version`` every 10 ms — the previous mechanism.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import select
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("errands.worker")

PROC_UNIX = "/proc/net/unix"
PREFIX = "errands-wake"

# Messages. Workers ("w") want new jobs; subscribers ("s", e.g. a Queue waiting for a job to
# finish) want every change, completions included.
JOBS = b"j"  # jobs were enqueued, retried or recovered
DONE = b"d"  # outcomes were recorded
PENDING = b"p"  # jobs were written in an application transaction not yet committed
STOP = b"x"  # sent by a listener to itself to end its thread
WORKER, SUBSCRIBER = "w", "s"
ROLES_FOR = {JOBS: (WORKER, SUBSCRIBER), DONE: (SUBSCRIBER,), PENDING: (WORKER, SUBSCRIBER)}

REFRESH = 0.5  # seconds a sender trusts its cached list of listeners
FALLBACK = 0.25  # seconds between data_version checks when no datagram arrives
POLL = 0.01  # the data_version poll where datagrams are not available
PENDING_WINDOW = 2.0  # how long to look for the commit of a transactional enqueue
PENDING_MAX_STEP = 0.032


class _Backend(Protocol):
    path: str

    def connect(self) -> sqlite3.Connection: ...


def supported() -> bool:
    """Abstract-namespace sockets and a readable socket list: Linux."""
    return hasattr(socket, "AF_UNIX") and os.path.exists(PROC_UNIX)


def database_key(path: str) -> str | None:
    """Names the file, not the path: symlinks and relative paths reach the same listeners."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return hashlib.sha1(f"{st.st_dev}:{st.st_ino}".encode()).hexdigest()[:16]


def listeners(key: str) -> dict[str, list[bytes]]:
    """Addresses of the listeners bound for this database, by role, from /proc/net/unix."""
    marker = f"@{PREFIX}/{key}/"
    found: dict[str, list[bytes]] = {WORKER: [], SUBSCRIBER: []}
    try:
        with open(PROC_UNIX, encoding="ascii", errors="replace") as f:
            for line in f:
                at = line.find(marker)
                if at < 0:
                    continue
                name = line[at + 1 :].strip()
                role = name[len(marker) - 1 : len(marker)]
                if role in found:
                    found[role].append(b"\0" + name.encode())
    except OSError:
        pass
    return found


class Notifier:
    """The sending side, one per backend: fire-and-forget datagrams after a commit."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._key: str | None = None
        self._sock: socket.socket | None = None
        self._peers: dict[str, list[bytes]] = {}
        self._fetched = float("-inf")
        self._lock = threading.Lock()
        self.enabled = supported()

    def send(self, message: bytes) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._fetched > REFRESH:
            self._refresh(now)
        peers = self._peers
        stale = False
        for role in ROLES_FOR[message]:
            for address in peers.get(role, ()):
                try:
                    self._socket().sendto(message, address)
                except ConnectionRefusedError:
                    stale = True  # that listener is gone
                except BlockingIOError:
                    pass  # its queue is full of unread wake-ups already: nothing is lost
                except OSError:
                    stale = True
        if stale:
            self._fetched = float("-inf")

    def _refresh(self, now: float) -> None:
        if self._key is None:
            self._key = database_key(self._path)
            if self._key is None:
                return  # the file does not exist yet: nobody can be listening
        self._peers = listeners(self._key)
        self._fetched = now

    def _socket(self) -> socket.socket:
        sock = self._sock
        if sock is None:
            with self._lock:  # two threads' first sends must not each open one (one would leak)
                if self._sock is None:
                    new = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    new.setblocking(False)  # a wake-up must never hold up the enqueue
                    self._sock = new
                sock = self._sock
        return sock

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class _DataVersion:
    """``PRAGMA data_version`` on one connection: it changes whenever another connection
    commits to the file, so it confirms a wake-up hint (or replaces one) for microseconds."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._last = self._read()

    def _read(self) -> int:
        value: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
        return value

    def changed(self) -> bool:
        try:
            current = self._read()
        except sqlite3.Error:
            return False  # transient (busy); the worker's poll_interval covers us
        if current == self._last:
            return False
        self._last = current
        return True


class _Listener:
    """A daemon thread with a connection of its own, calling ``on_change`` when the file's
    ``data_version`` moves; subclasses decide when to look (``_watch``)."""

    def __init__(self, backend: _Backend, on_change: Callable[[], None]) -> None:
        self._backend = backend
        self._on_change = on_change
        self._stop = threading.Event()
        self.connected = threading.Event()  # set once changes from here on will be seen
        self._thread = threading.Thread(target=self._run, name="errands-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Nothing may escape this thread: a dead listener only costs its wake-ups (the
        # worker's poll_interval still finds the jobs), and the worker's own writes report
        # a database that is gone.
        try:
            conn = self._backend.connect()
        except Exception as exc:
            log.warning(
                "wake-up listener stopped (%s); new jobs are found every poll_interval instead",
                exc,
            )
            return
        try:
            version = _DataVersion(conn)
            self.connected.set()
            self._watch(version)
        except Exception as exc:
            log.warning(
                "wake-up listener stopped (%s); new jobs are found every poll_interval instead",
                exc,
            )
        finally:
            conn.close()

    def _watch(self, version: _DataVersion) -> None:
        raise NotImplementedError


class DatagramListener(_Listener):
    """The receiving side: a thread waiting on its socket, confirming with data_version."""

    def __init__(
        self, backend: _Backend, on_change: Callable[[], None], *, completions: bool = False
    ) -> None:
        key = database_key(backend.path)
        if key is None:
            raise OSError(f"{backend.path} does not exist")
        role = SUBSCRIBER if completions else WORKER
        self.address = f"\0{PREFIX}/{key}/{role}/{os.getpid()}-{secrets.token_hex(4)}".encode()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.bind(self.address)
        except OSError:
            self._sock.close()
            raise
        super().__init__(backend, on_change)  # starts the thread: the socket is bound by now

    def _watch(self, version: _DataVersion) -> None:
        sock = self._sock
        sock.setblocking(False)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        pending_until, step = 0.0, PENDING_MAX_STEP
        while not self._stop.is_set():
            now = time.monotonic()
            if pending_until > now:
                timeout = min(step, pending_until - now)
                step = min(step * 2, PENDING_MAX_STEP)
            else:
                timeout = FALLBACK
            poller.poll(timeout * 1000)
            messages = []
            while True:  # a burst of enqueues: one check for all of them
                try:
                    messages.append(sock.recv(16))
                except (BlockingIOError, InterruptedError):
                    break
            if self._stop.is_set() or STOP in messages:
                return
            if PENDING in messages:
                pending_until, step = time.monotonic() + PENDING_WINDOW, 0.001
            if version.changed():
                pending_until = 0.0
                self._on_change()

    def close(self) -> None:
        self._stop.set()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(STOP, self.address)
        except OSError:
            pass  # the thread still sees _stop within FALLBACK
        self._thread.join(timeout=FALLBACK * 4 + 1)
        self._sock.close()


class PollingListener(_Listener):
    """Where datagrams are not available: ``PRAGMA data_version`` polled every 10 ms. It costs
    microseconds per check, so pickup takes ~10 ms at about 1% of a core."""

    def _watch(self, version: _DataVersion) -> None:
        while not self._stop.wait(POLL):
            if version.changed():
                self._on_change()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


def listen(
    backend: _Backend, on_change: Callable[[], None], *, completions: bool = False
) -> DatagramListener | PollingListener:
    if supported():
        try:
            return DatagramListener(backend, on_change, completions=completions)
        except OSError:
            pass  # e.g. sockets forbidden by a sandbox: polling still works
    return PollingListener(backend, on_change)
