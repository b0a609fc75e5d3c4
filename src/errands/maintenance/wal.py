"""The WAL keeper (SQLite): truncates a WAL file left large by a long reader, once
checkpoints can complete again, and counts the attempts a reader blocks so ``stats`` and
``check`` can say why the WAL stays large (docs/runtime.md, "The WAL under a long reader").

SQLite's own automatic checkpoints keep the WAL near 4 MiB and reuse the file, but they cannot
complete while a connection holds a read transaction on an older snapshot; the file then
grows with every commit and keeps its size after the reader has gone. PostgreSQL keeps no
WAL file of errands' own: ``storage()["wal_bytes"]`` is None there and a pass does nothing.
"""

from __future__ import annotations

import logging

from ..backends.verbs import RetentionVerbs

log = logging.getLogger("errands.maintenance")

# A WAL file past this size means checkpoints could not complete for a while: SQLite's own
# automatic checkpoints keep it near 4 MiB (1000 pages) and reuse the file, but a connection
# holding a read transaction on an older snapshot stops them, and the file then grows with
# every commit (~1.3 KB per job) and keeps its size after the reader has gone.
WAL_LARGE_BYTES = 16 * 1024 * 1024
WAL_INTERVAL = 10.0  # seconds between looks at the WAL's size (a stat() call)
WAL_WARN_EVERY = 30  # while blocked, log again every this many attempts (5 minutes)


class WalKeeper:
    """Maintenance service: truncate SQLite's WAL once it is large and checkpoints can
    complete again. Each pass stats the file; past ``threshold`` it tries a TRUNCATE
    checkpoint that gives up at once (never waits out the busy timeout in the control
    loop). ``blocked``, the attempts in a row that a reader or writer blocked, goes on the
    worker's registry row, so ``stats`` and ``check`` can say that checkpoints keep failing.
    On PostgreSQL (no WAL file of errands' own) a pass does nothing."""

    name = "wal"
    interval = WAL_INTERVAL

    def __init__(self, backend: RetentionVerbs, *, threshold: int = WAL_LARGE_BYTES) -> None:
        self.backend = backend
        self.threshold = threshold
        self.blocked = 0
        self.truncated = 0  # times this keeper truncated a large WAL

    def run_once(self, now: float) -> bool | None:
        """True: truncated; False: blocked; None: nothing to do."""
        size = self.backend.storage()["wal_bytes"]
        if size is None or size <= self.threshold:
            self.blocked = 0
            return None
        if self.backend.checkpoint(wait=False):
            self.truncated += 1
            log.info(
                "the SQLite WAL (%.1f MB) was truncated%s",
                size / 1e6,
                f" after {self.blocked} blocked attempt(s)" if self.blocked else "",
                extra={"errands": {"event": "wal_truncated", "wal_bytes": size}},
            )
            self.blocked = 0
            return True
        if self.blocked % WAL_WARN_EVERY == 0:
            log.warning(
                "the SQLite WAL is %.1f MB and cannot be checkpointed: a connection holds a "
                "read transaction open (an application, a shell, a backup); it is truncated "
                "as soon as that transaction ends",
                size / 1e6,
                extra={"errands": {"event": "wal_blocked", "wal_bytes": size}},
            )
        self.blocked += 1
        return False
