"""Every domain verb, written once over named queries, grouped by noun.

Both dialects keep queries of the same names (``sql/<dialect>/*.sql``) with the same result
columns (tests/backends/test_sql_columns.py), read by column name, so the logic — fencing,
which rows go with which outcome, audit events — is shared; a dialect (``sqlite.py``,
``postgres.py``)
supplies only the hooks of ``host.SQLHost``: connections, transactions, list and time
parameters, migrations' runner and its wake-ups (as Oban's Lite engine reuses the Postgres one).

Each noun is a mixin on ``SQLHost`` in a module of its own, and a protocol in ``verbs.py``.
Mixins rather than composed objects, so every caller keeps speaking to one backend object
(``q.backend.claim``) and the hot path makes no extra hop; each mixin reaches only the hooks
``SQLHost`` declares (and ``periodic`` the jobs noun's insert, through a typed protocol).
"""

from __future__ import annotations

from .activity import SQLActivity
from .deps import SQLDeps
from .expiry import SQLExpiry
from .flow import SQLFlow
from .jobs import SQLJobs
from .jobs_actions import SQLJobActions
from .jobs_operator import SQLJobOperator
from .leader import SQLLeader
from .periodic import SQLPeriodic
from .retention import SQLRetention
from .schema import SQLSchema
from .stats import SQLStats
from .steps import SQLSteps
from .task_types import SQLTaskTypes
from .vacuum import SQLVacuum
from .workers import SQLWorkers


class SQLBackend(
    SQLSchema,
    SQLJobs,
    SQLJobOperator,
    SQLJobActions,
    SQLLeader,
    SQLWorkers,
    SQLPeriodic,
    SQLTaskTypes,
    SQLRetention,
    SQLActivity,
    SQLStats,
    SQLFlow,
    SQLDeps,
    SQLSteps,
    SQLExpiry,
    SQLVacuum,
):
    """The nouns together; a dialect subclasses this and fills in ``SQLHost``'s hooks.

    The hooks one noun declares for another (``SQLHost`` declares them, one noun implements
    them, others call them) are bound here by name, not left to the mixins' order:
    tests/backends/test_hooks.py holds that every such hook is bound to its one
    implementation."""

    # Every write that makes jobs final releases their dependents in its transaction, and a
    # manual retry revives them (deps.py).
    _release = SQLDeps._release
    _revive = SQLDeps._revive
    # The claim of a worker with limited types is counted against the limits (flow.py).
    _claim_limited = SQLFlow._claim_limited
    # The plain claim (jobs.py), which PostgreSQL replaces with its one statement.
    _claim_rows = SQLJobs._claim_rows
    # The outcome batch moves rate-limited jobs' recorded starts to their handlers' (flow.py).
    _handler_starts = SQLFlow._handler_starts
    # A suspended run (a durable sleep or wait) is applied in the outcome batch (steps.py).
    _suspend = SQLSteps._suspend
