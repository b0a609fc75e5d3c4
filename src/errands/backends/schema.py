"""The schema noun: migrations, applied once by whichever process gets there first.

Queries: ``schema.sql``; scripts: ``migration_NNNN.sql``. A dialect supplies how a script
runs (``_run_script``) and how concurrent migrators queue up (``_serialize_migrations``).
"""

from __future__ import annotations

import time

from ..errors import SchemaConflictError, SchemaVersionError
from . import prefix as prefixes
from . import sql as sql_files
from .host import Conn, SQLHost


class SQLSchema(SQLHost):
    """Schema version checks and migrations."""

    schema_target: int  # the schema version this errands writes
    where: str  # how messages name the database: a file path, or host:port/dbname
    other_jobs_table_hint: str = "use another database for errands"
    prefix: str = ""  # the table prefix in use (prefix.py), '' for none

    def _migrations_tables(self) -> list[str]:
        """The names of the tables here that may be an errands migrations table (the
        ``installations`` query), read without writing anything."""
        with self._read() as conn:
            return [str(r["name"]) for r in self._dicts(conn.execute(self.q["installations"], {}))]

    def _use_prefix(self, named: str | None) -> None:
        """Settle the table prefix before anything else reads or writes: the one named, or
        the one the database's installation was created with (prefix.choose)."""
        found = prefixes.installed(self._migrations_tables())
        self.prefix = prefixes.choose(named, found, self.where)
        self.q = sql_files.queries(self.dialect, self.prefix)

    def table(self, name: str) -> str:
        """The name errands' object ``name`` has here: ``name`` with this database's table
        prefix (``jobs`` → ``errands_jobs``). Only errands' own names are accepted."""
        if name not in sql_files.object_names(self.dialect):
            raise ValueError(f"{name!r} is not one of errands' tables, indexes or triggers")
        return self.prefix + name

    def _serialize_migrations(self, conn: Conn) -> None:
        """Make concurrent migrators queue up (SQLite's BEGIN IMMEDIATE already does)."""

    def _run_script(self, conn: Conn, script: str) -> None:
        raise NotImplementedError

    def migrate(self) -> None:
        """Apply pending migrations in one transaction; safe when many processes race here
        (the first applies them, the rest find nothing to do). A database written by a newer
        errands, or holding an object under a name errands needs, is refused untouched.
        The schema version lives only in ``errands_migrations``: never in the database's
        header (SQLite's ``user_version`` and ``application_id`` belong to the application)."""
        q = self.q
        if self._schema_is_current():
            return  # the common case: opening a queue needs no write lock
        with self._write("migrate") as conn:
            self._serialize_migrations(conn)
            if conn.execute(q["schema_table_exists"], {}).fetchone() is None:
                self._refuse_conflicts(conn)
                conn.execute(q["create_schema_table"], {})
            current = self._version(conn)
            self._refuse_newer(current)
            for version, script in sql_files.migrations(self.dialect, self.prefix):
                if version <= current:
                    continue
                self._run_script(conn, script)
                conn.execute(q["record_migration"], {"version": version, "now": time.time()})

    def _version(self, conn: Conn) -> int:
        return int(self._dicts(conn.execute(self.q["schema_version"], {}))[0]["version"])

    def _refuse_newer(self, current: int) -> None:
        if current > self.schema_target:
            raise SchemaVersionError(
                f"{self.where} has errands schema version {current}, newer than this errands "
                f"supports ({self.schema_target}); upgrade errands (pip install -U errands) "
                "— nothing was changed"
            )

    def _refuse_conflicts(self, conn: Conn) -> None:
        """A database errands has never migrated must not already use a name errands' own
        migrations create: CREATE would fail half-way, or errands would read the
        application's table as its own."""
        names = [self.prefix + name for _, name in sql_files.created_objects(self.dialect)]
        rows = conn.execute(self.q["conflicting_objects"], {"names": self._list(names)})
        found = [f"{r['kind']} '{r['name']}'" for r in self._dicts(rows)]
        if found:
            raise SchemaConflictError(
                f"{self.where} already has {', '.join(found)}, which errands did not create "
                f"and needs the name{'s' if len(found) > 1 else ''} of; "
                f"{self._conflict_hint()} — nothing was changed"
            )

    def _conflict_hint(self) -> str:
        if self.prefix:
            return (
                f"choose another table_prefix than {self.prefix!r}, or {self.other_jobs_table_hint}"
            )
        return (
            "give errands' tables a prefix of their own: Queue(url, table_prefix='errands_') "
            f"or ?table_prefix=errands_ in the URL; or {self.other_jobs_table_hint}"
        )

    def schema_version(self) -> int:
        with self._read() as conn:
            return self._version(conn)

    def _schema_is_current(self) -> bool:
        """Opening a queue whose schema is up to date needs only a read: no write lock, so a
        worker can start while a long transaction holds the database."""
        with self._read() as conn:
            if conn.execute(self.q["schema_table_exists"], {}).fetchone() is None:
                return False
            version = self._version(conn)
        return bool(version == self.schema_target)
