"""The schema noun: migrations, applied once by whichever process gets there first.

Queries: ``schema.sql``; scripts: ``migration_NNNN.sql``. A dialect supplies how a script
runs (``_run_script``) and how concurrent migrators queue up (``_serialize_migrations``).
"""

from __future__ import annotations

import time

from ..errors import SchemaConflictError, SchemaVersionError
from . import sql as sql_files
from .host import Conn, SQLHost


class SQLSchema(SQLHost):
    """Schema version checks and migrations."""

    schema_target: int  # the schema version this errands writes
    where: str  # how messages name the database: a file path, or host:port/dbname
    other_jobs_table_hint: str = "use another database for errands"

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
            for version, script in sql_files.migrations(self.dialect):
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
        names = [name for _, name in sql_files.created_objects(self.dialect)]
        rows = conn.execute(self.q["conflicting_objects"], {"names": self._list(names)})
        found = [f"{r['kind']} '{r['name']}'" for r in self._dicts(rows)]
        if found:
            raise SchemaConflictError(
                f"{self.where} already has {', '.join(found)}, which errands did not create "
                f"and needs the name{'s' if len(found) > 1 else ''} of; "
                f"{self.other_jobs_table_hint} — nothing was changed"
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
