"""The no-op task of each peer, importable by that peer's own worker command.

Each block runs only when its environment variable names a database, so one file serves every
virtual environment (each has only its own library installed). PEER_DB is a SQLite file,
PEER_PG a PostgreSQL URL, PEER_REDIS a Redis URL.
"""

from __future__ import annotations

import os

PEER = os.environ.get("PEER_NAME", "")

if PEER == "huey":
    from huey import SqliteHuey

    huey = SqliteHuey(filename=os.environ["PEER_DB"])

    @huey.task()
    def noop(i: int) -> int:
        return 1  # stored as the result, so done jobs can be counted


if PEER == "rq":

    def rq_noop(i: int) -> int:
        return 1


if PEER == "procrastinate":
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=os.environ["PEER_PG"])
    )

    @app.task(name="noop")
    async def proc_noop(i: int) -> None:  # async: procrastinate 3's workers are asyncio
        return None


if PEER == "pgqueuer":
    import psycopg
    from pgqueuer import PgQueuer
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.models import Job

    async def main() -> PgQueuer:
        """The factory ``pgq run apps:main`` calls (pgqueuer's documented entry point)."""
        conn = await psycopg.AsyncConnection.connect(os.environ["PEER_PG"], autocommit=True)
        pgq = PgQueuer(PsycopgDriver(conn))

        @pgq.entrypoint("noop")
        async def pgq_noop(job: Job) -> None:
            return None

        return pgq


if __name__ == "__main__" and PEER == "pgqueuer":
    # pgqueuer 1.6's `pgq run` fails before starting (its --log-level default reaches the
    # logger as a str); this is what that command does after parsing its options.
    import asyncio

    async def _run() -> None:
        pgq = await main()
        await pgq.run()

    asyncio.run(_run())
