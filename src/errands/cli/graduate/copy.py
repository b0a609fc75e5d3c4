"""``errands graduate``: move a SQLite queue to PostgreSQL, ids kept, verified.

Every table of the schema is copied in rowid order, in batches that each commit on their own,
with ``ON CONFLICT DO NOTHING`` and rows already present skipped by key — so an interrupted run
is simply run again and carries on. The source is read in one SQLite read transaction (a
consistent snapshot even if something still writes to it). Afterwards the identity sequences
are moved past the copied ids, and each table is verified by row count and by an
order-independent checksum over every column, computed the same way on both sides. The
figures ``stats`` reads are then recounted on the target from the copied rows
(``Queue.recount_figures``): they are kept by errands' own writes, which a copy is not.

A row in ``errands_graduation`` (a table of the schema, migration 5) remembers which source a
target is being filled from, so a rerun into a half-filled target is recognised as a resume
rather than refused as "not empty".

The fixed statements are named queries (``sql/<dialect>/graduate.sql``). The per-table ones —
count, page, insert, verify — are composed for each table of ``TABLES`` and the columns the
schema itself reports, quoted as identifiers (``psycopg.sql`` on the target): one statement
per table and column list, never from user input.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from ...backends import sql as named
from ...core import faults
from ...core import payload as payload_json
from ...errors import ErrandsError

# Copy order respects foreign keys (jobs before the rows that reference them). Each table's
# key is what "already copied" means. maintenance_leases is not copied: leadership is
# re-elected on the new database within a lease; nor is errands_meta: its facts (the
# graduation mark) are about the file itself.
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("jobs", ("id",)),
    ("job_attempts", ("id",)),
    ("job_events", ("id",)),
    ("job_blobs", ("id",)),
    ("job_deps", ("job_id", "upstream_id")),  # dependencies (docs/pipelines.md)
    ("workers", ("id",)),
    ("periodic", ("name",)),
    ("task_types", ("type",)),
    ("job_stats_hourly", ("hour", "queue", "type", "outcome")),
    # Flow control: a paused queue stays paused and a stored limit stays in force on the new
    # database (the rate windows' starts are not copied: graduate with the workers stopped).
    ("queue_pauses", ("queue",)),
    ("flow_limits", ("key",)),
    # Durable steps (docs/durable-steps.md): a sleeping or waiting job resumes there with
    # its recorded steps and the signals sent to it.
    ("job_steps", ("job_id", "seq")),
    ("job_signals", ("id",)),
    # The operator activity log: who did what stays readable on the new database.
    ("operator_actions", ("id",)),
)
IDENTITY_TABLES = (
    "jobs",
    "job_attempts",
    "job_events",
    "job_blobs",
    "job_signals",
    "operator_actions",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MASK = (1 << 64) - 1
MAX_REPORTED = 50  # rows listed by name when some cannot be copied

Progress = Callable[[str, int, int], None]  # (table, rows done, rows in source)


@dataclass(frozen=True, slots=True)
class Names:
    """The table prefix of each side (docs/operations.md): the source's own, and the
    target's — by default the same — with each side's named queries under it."""

    source_prefix: str = ""
    target_prefix: str = ""

    def src(self, table: str) -> str:
        return self.source_prefix + table

    def dst(self, table: str) -> str:
        return self.target_prefix + table

    @property
    def source_q(self) -> dict[str, str]:  # the source is always SQLite, the target PostgreSQL
        return named.queries("sqlite", self.source_prefix)

    @property
    def target_q(self) -> dict[str, str]:
        return named.queries("postgres", self.target_prefix)


class GraduateError(ErrandsError):
    """Graduation refused or failed verification; the message says what to do."""


@dataclass(slots=True)
class TableReport:
    name: str
    source_rows: int = 0
    copied: int = 0  # inserted by this run
    skipped: int = 0  # already in the target (an earlier run, or --force into a non-empty one)
    target_rows: int = 0
    extra_rows: int = 0  # in the target but not in the source (only with --force)
    checksum_ok: bool = False

    @property
    def ok(self) -> bool:
        return self.checksum_ok and self.target_rows - self.extra_rows == self.source_rows


@dataclass(slots=True)
class Report:
    source: str
    target: str
    tables: list[TableReport] = field(default_factory=list)
    complete: bool = False  # False: stopped early (max_batches); run again to carry on
    resumed: bool = False
    seconds: float = 0.0
    table_prefix: str = ""  # the target's (docs/operations.md)
    # The target had finished a graduation from this file before this run: the queue has
    # lived there since, and its rows may hold work done there (never to be emptied).
    moved: bool = False

    @property
    def ok(self) -> bool:
        return self.complete and all(t.ok for t in self.tables)

    def summary(self) -> str:
        extra = sum(t.extra_rows for t in self.tables)
        lines = [
            f"{t.name:<18} source {t.source_rows:>9}  copied {t.copied:>9}  "
            f"skipped {t.skipped:>9}  "
            f"{'ok' if t.ok else 'MISMATCH'}"
            + (f"  (+{t.extra_rows} only in target)" if t.extra_rows else "")
            for t in self.tables
        ]
        verdict = (
            "verified: every row and checksum matches"
            if self.ok
            else "incomplete: run the same command again to carry on"
            if not self.complete
            else _kept_target(self.moved, extra)
            if self.moved or extra
            else "verification FAILED: the tables marked MISMATCH differ between the source "
            "and the target — rows changed in the source after they were copied (a worker or "
            "an application still writing to it), or in the target. Stop every worker and "
            "producer on the source, empty the target (drop and create the database again), "
            "and run graduate again; a rerun alone never updates rows already copied"
        )
        return "\n".join([*lines, f"{verdict} ({self.seconds:.1f}s)"])


def _kept_target(moved: bool, extra: int) -> str:
    """A failed verification whose target holds work of its own: emptying it would delete
    the jobs run there since the move, so the advice is never to (docs/postgres.md)."""
    why = (
        "it finished a graduation from this file before, and the queue has lived there since"
        if moved
        else f"{extra:,} rows there are not in this file (work done there, or another source's)"
    )
    return (
        f"verification FAILED: the target holds work the source does not — {why}. Do NOT "
        "empty it. If the queue moved there, it lives there now: point every worker and "
        "producer at it (docs/postgres.md); if not, graduate into an empty database instead"
    )


def graduate(
    sqlite_url: str,
    pg_url: str,
    *,
    batch_size: int = 5000,
    progress: Progress | None = None,
    force: bool = False,
    max_batches: int | None = None,
    ignore_live_workers: bool = False,
) -> Report:
    """Copy every row of the SQLite queue at ``sqlite_url`` into PostgreSQL at ``pg_url``.

    Refuses a target that already holds errands rows unless they come from an earlier,
    interrupted run from the same source, or ``force`` is given (rows whose keys exist are then
    left as they are). ``max_batches`` stops after that many batches (for tests and for
    copying a large queue in slices); the report says whether it completed. Refuses while a
    worker is alive on the source (its later outcomes would be missing from the copy) unless
    ``ignore_live_workers``. Once verified, the source is marked graduated (``errands_meta``):
    it refuses new work until ``errands reopen``.
    """
    import psycopg

    from ...backends import prefix, redact
    from ...backends.pg_connection import describe
    from ...backends.sqlite import path_from_url
    from ...queue import Queue

    if batch_size < 1:
        raise GraduateError(f"batch_size must be >= 1, got {batch_size}")
    if "://" in sqlite_url and not sqlite_url.startswith("sqlite://"):
        raise GraduateError(
            f"the source must be the SQLite queue to copy from (--db PATH), got "
            f"{redact(sqlite_url)}; the PostgreSQL URL goes in --to"
        )
    path = path_from_url(sqlite_url)
    if not os.path.exists(path):
        raise GraduateError(f"{path} does not exist; give the SQLite queue with --db PATH")
    started = time.monotonic()
    source_id = os.path.realpath(path)
    # Opening each as a Queue checks (and, for the target, creates) the schema. The target
    # keeps the source's table prefix unless its URL names one (?table_prefix=…).
    pg_url, named_prefix = prefix.split_url(pg_url)
    with Queue(sqlite_url, allow_graduated=True) as src_q:
        names = Names(src_q.table_prefix, src_q.table_prefix)
        src_version = src_q.reads.schema_version()
        live = [] if ignore_live_workers else src_q.workers(now=time.time())
        moved = src_q.graduation()
    if moved is not None:
        # Run again after the cut-over, a copy would meet jobs run there since (docs/postgres.md).
        raise GraduateError(
            f"{path} already graduated to {moved.target} on "
            f"{datetime.fromtimestamp(moved.at, UTC):%Y-%m-%d %H:%M} UTC: the move is done "
            "and the queue lives there now — point workers and producers at it "
            f"(ERRANDS_DB={moved.target}). Nothing was copied. Only to add jobs this file took "
            "during the copy, before anything ran there: `errands reopen`, then graduate again"
        )
    target_prefix = names.source_prefix if named_prefix is None else named_prefix
    with Queue(pg_url, table_prefix=target_prefix) as dst_q:
        names = Names(names.source_prefix, dst_q.table_prefix)
        dst_version = dst_q.reads.schema_version()
    if live:
        raise GraduateError(_live_workers_message(path, live))
    if src_version != dst_version:
        raise GraduateError(
            f"{path} is at schema version {src_version} but the target at {dst_version}; "
            "run the same errands version on both (open the older one with it to migrate)"
        )
    report = Report(source=path, target=describe(pg_url), table_prefix=names.target_prefix)
    src = sqlite3.connect(path, isolation_level=None)
    # Bytes that are not UTF-8 (an older errands could store a lone surrogate) are read as
    # surrogate escapes, so the check below can name the row instead of the read failing.
    src.text_factory = _escaped_text
    try:
        src.execute("BEGIN")  # one snapshot for the copy and the verification
        with psycopg.connect(pg_url, autocommit=True) as dst:
            _json_as_text(dst)
            _refuse_uncopyable(src, dst, path, names)
            report.resumed, report.moved = _claim_target(
                dst, source_id, force, report.target, names
            )
            batches = 0
            for table, key in TABLES:
                t = TableReport(table)
                report.tables.append(t)
                columns = _source_columns(src, table, names)
                types = _target_types(dst, table, names)
                missing = set(columns) - set(types)
                if missing:
                    raise GraduateError(
                        f"target table {table} lacks columns {sorted(missing)}; both sides must "
                        "be migrated by the same errands version"
                    )
                count = f"SELECT count(*) FROM {_quoted(names.src(table))}"
                (t.source_rows,) = src.execute(count).fetchone()
                done = _copy_table(
                    src,
                    dst,
                    t,
                    key,
                    columns,
                    types,
                    batch_size,
                    progress,
                    max_batches,
                    batches,
                    names,
                )
                batches = done
                if max_batches is not None and batches >= max_batches:
                    report.seconds = time.monotonic() - started
                    return report
            _advance_sequences(dst, names)
            for t in report.tables:
                _verify(src, dst, t, dict(TABLES)[t.name], names)
            report.complete = True
            # The figures stats reads are kept by errands' own writes, which COPY is not.
            with Queue(pg_url, table_prefix=names.target_prefix) as dst_q:
                dst_q.recount_figures()
            if report.ok:
                params = {"source": source_id, "now": time.time()}
                dst.execute(names.target_q["finish_graduation"], params)
    finally:
        src.close()
    if report.ok:
        # The file now refuses new work, naming where its queue went (no password).
        with Queue(sqlite_url, allow_graduated=True) as src_q:
            src_q.mark_graduated(redact(pg_url), now=time.time())
    report.seconds = time.monotonic() - started
    return report


def _live_workers_message(path: str, live: list[dict[str, Any]]) -> str:
    named = "; ".join(
        f"worker {w['id']} (pid {w['pid']} on {w['hostname']}, last seen {w['last_seen_at']})"
        for w in live[:5]
    )
    more = f" and {len(live) - 5} more" if len(live) > 5 else ""
    first = live[0]
    return (
        f"{len(live)} worker(s) alive on {path}: {named}{more}; what they do after the copy "
        f"would be missing from it. Stop them first (e.g. `kill -TERM {first['pid']}` on "
        f"{first['hostname']}: running jobs finish, then it exits), then run graduate again; "
        "or pass --ignore-live-workers to copy anyway"
    )


def _refuse_uncopyable(src: sqlite3.Connection, dst: Any, path: str, names: Names) -> None:
    """Before anything is copied: every row PostgreSQL could not store (a NUL character or
    bytes that are not UTF-8 in a text or JSON column; JSON that is not JSON), by table and
    key, one line each. Rows written by this errands never qualify: it refuses them at enqueue
    and makes results and errors storable; an older errands did not."""
    problems: list[str] = []
    found = 0
    for table, key in TABLES:
        types = _target_types(dst, table, names)
        columns = _source_columns(src, table, names)
        checked = [c for c in columns if types.get(c) in ("jsonb", "text")]
        if not checked:
            continue
        columns_sql = ", ".join(map(_quoted, (*key, *checked)))
        select = f"SELECT {columns_sql} FROM {_quoted(names.src(table))}"
        for row in src.execute(select):
            keys, values = row[: len(key)], row[len(key) :]
            for column, value in zip(checked, values, strict=True):
                reason = _why_uncopyable(types[column], column, value)
                if reason is None:
                    continue
                found += 1
                if len(problems) < MAX_REPORTED:
                    name = ", ".join(f"{k} {v!r}" for k, v in zip(key, keys, strict=True))
                    problems.append(f"  {table} {name}: {reason}")
    if found:
        more = f"  … and {found - MAX_REPORTED} more\n" if found > MAX_REPORTED else ""
        raise GraduateError(
            f"{found} value(s) in {path} cannot be stored by PostgreSQL; nothing was copied:\n"
            + "\n".join(problems)
            + f"\n{more}fix or clear them in the SQLite file (e.g. UPDATE {names.src('jobs')} "
            "SET result = NULL WHERE id = …), or delete those jobs, then run graduate again"
        )


def _why_uncopyable(kind: str, column: str, value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    if kind == "jsonb":
        try:
            decoded = json.loads(value, parse_constant=_no_constant)
        except ValueError as exc:
            return f"{column} is not JSON PostgreSQL accepts ({exc})"
        error = payload_json.unstorable_text_in(decoded, column)
        return None if error is None else str(error).split(", which")[0]
    if "\x00" in value:
        return f"{column} holds a NUL character at index {value.index(chr(0))}"
    if any("\udc80" <= ch <= "\udcff" for ch in value):
        return f"{column} holds bytes that are not UTF-8"
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _escaped_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _claim_target(
    dst: Any, source_id: str, force: bool, where: str, names: Names
) -> tuple[bool, bool]:
    """Refuse a non-empty target unless it is our own earlier work; returns (resumed,
    whether that earlier work had finished: the queue moved there)."""
    from psycopg import sql

    ours = dst.execute(names.target_q["graduation_of"], {"source": source_id}).fetchone()
    occupied = [
        table
        for table, _ in TABLES
        if dst.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(names.dst(table)))
        ).fetchone()[0]
    ]
    if occupied and ours is None and not force:
        raise GraduateError(
            f"the target {where} already has rows in {', '.join(occupied)}; graduate into an "
            "empty database, or pass --force to merge (rows whose ids exist there are kept)"
        )
    dst.execute(names.target_q["start_graduation"], {"source": source_id, "now": time.time()})
    return bool(occupied) and ours is not None, ours is not None and ours[0] is not None


def _source_columns(src: sqlite3.Connection, table: str, names: Names) -> list[str]:
    rows = src.execute(names.source_q["table_columns"], {"table": names.src(table)}).fetchall()
    return [str(name) for name, _ in rows]


def _target_types(dst: Any, table: str, names: Names) -> dict[str, str]:
    rows = dst.execute(names.target_q["table_columns"], {"table": names.dst(table)}).fetchall()
    return {name: dtype for name, dtype in rows}


def _quoted(identifier: str) -> str:
    """An SQLite identifier, quoted (every one here is a table of TABLES or a column the
    schema reports)."""
    return '"' + identifier.replace('"', '""') + '"'


def _copy_table(
    src: sqlite3.Connection,
    dst: Any,
    t: TableReport,
    key: tuple[str, ...],
    columns: list[str],
    types: dict[str, str],
    batch_size: int,
    progress: Progress | None,
    max_batches: int | None,
    batches: int,
    names: Names,
) -> int:
    """Copy one table in rowid order; returns the batch count so far."""
    import psycopg
    from psycopg import sql

    select = (
        f"SELECT rowid, {', '.join(map(_quoted, columns))} FROM {_quoted(names.src(t.name))} "
        "WHERE rowid > ? ORDER BY rowid LIMIT ?"
    )
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
        sql.Identifier(names.dst(t.name)),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL(", ").join(sql.Placeholder() for _ in columns),
    )
    convert = [_to_target(types[c]) for c in columns]
    by_id = key == ("id",) and types.get("id") == "bigint"
    after, done = 0, 0
    while max_batches is None or batches < max_batches:
        rows = src.execute(select, (after, batch_size)).fetchall()
        if not rows:
            break
        after = rows[-1][0]
        values = [tuple(f(v) for f, v in zip(convert, r[1:], strict=True)) for r in rows]
        if by_id:  # skip what an earlier run already copied without sending it again
            lo, hi = values[0][0], values[-1][0]
            present = {
                r[0]
                for r in dst.execute(
                    sql.SQL("SELECT id FROM {} WHERE id BETWEEN %s AND %s").format(
                        sql.Identifier(names.dst(t.name))
                    ),
                    (lo, hi),
                )
            }
            fresh = [v for v in values if v[0] not in present]
        else:
            fresh = values
        inserted = 0
        if fresh:
            try:
                with dst.transaction(), dst.cursor() as cur:
                    cur.executemany(insert, fresh)
                    inserted = max(cur.rowcount, 0)
            except psycopg.Error as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise GraduateError(
                    f"PostgreSQL refused a batch of {t.name} ({key[0]} {values[0][0]!r} to "
                    f"{values[-1][0]!r}): {first}; earlier batches stay copied — fix the "
                    "source row(s) and run graduate again to carry on"
                ) from None
        t.copied += inserted
        t.skipped += len(values) - inserted
        done += len(values)
        batches += 1
        if progress is not None:
            progress(t.name, done, t.source_rows)
        faults.point(f"graduate.{t.name}.after_batch")
    return batches


def _advance_sequences(dst: Any, names: Names) -> None:
    """Identity sequences past the copied ids, so new jobs never reuse one (never backwards)."""
    dst.execute(names.target_q["advance_identities"])


def _verify(
    src: sqlite3.Connection, dst: Any, t: TableReport, key: tuple[str, ...], names: Names
) -> None:
    from psycopg import sql

    types = _target_types(dst, t.name, names)
    columns = _source_columns(src, t.name, names)
    kinds = [types[c] for c in columns]
    keypos = [columns.index(k) for k in key]
    src_sum, keys = 0, set()
    source = f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(names.src(t.name))}"
    for row in src.execute(source):
        norm = tuple(_norm_source(kind, v) for kind, v in zip(kinds, row, strict=True))
        keys.add(tuple(norm[i] for i in keypos))
        src_sum = (src_sum + _digest(norm)) & _MASK
    dst_sum, matched, total = 0, 0, 0
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.Identifier(names.dst(t.name))
    )
    # A server-side cursor streams the table instead of loading it whole.
    with dst.transaction(), dst.cursor(name=f"errands_verify_{t.name}") as cur:
        cur.itersize = 5000
        cur.execute(select)
        for row in cur:
            total += 1
            norm = tuple(_norm_target(kind, v) for kind, v in zip(kinds, row, strict=True))
            if tuple(norm[i] for i in keypos) in keys:
                matched += 1
                dst_sum = (dst_sum + _digest(norm)) & _MASK
    t.target_rows = total
    t.extra_rows = total - matched
    t.checksum_ok = matched == len(keys) == t.source_rows and src_sum == dst_sum


# -- value conversion and normalization ---------------------------------------------------


def _to_target(pg_type: str) -> Callable[[Any], Any]:
    if pg_type == "timestamp with time zone":
        return lambda v: None if v is None else datetime.fromtimestamp(v, UTC)
    return lambda v: v


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // timedelta(microseconds=1)


def _canonical_json(text: str) -> str:
    # Decimal for every number, normalized: jsonb may print 1e20 as 100000000000000000000.
    def number(s: str) -> Decimal:
        return Decimal(s).normalize()

    value = json.loads(text, parse_float=number, parse_int=number)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _norm_source(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "timestamp with time zone":
        return _micros(datetime.fromtimestamp(v, UTC))
    if kind == "jsonb":
        return _canonical_json(v)
    if kind == "double precision":
        return float(v)
    return v


def _norm_target(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "timestamp with time zone":
        return _micros(v)
    if kind == "jsonb":
        return _canonical_json(v)
    if kind == "double precision":
        return float(v)
    return v


def _digest(row: tuple[Any, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(repr(row).encode(), digest_size=8).digest(), "big")


def _json_as_text(conn: Any) -> None:
    from psycopg.types.json import set_json_loads

    set_json_loads(lambda data: data.decode() if isinstance(data, bytes) else data, conn)
