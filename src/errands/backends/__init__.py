"""Backend selection by URL: a path or ``sqlite:///…`` → SQLite; ``postgresql://…`` → PostgreSQL."""

from __future__ import annotations

from ..core.settings import Settings
from ..errors import ConfigurationError
from . import prefix
from .urls import CONNINFO, redact, scrub, secrets
from .verbs import Backend


def open_backend(url: str, settings: Settings, table_prefix: str | None = None) -> Backend:
    """The backend for ``url``; ``table_prefix`` (or ``?table_prefix=`` in the URL, which the
    driver never sees) names errands' tables' prefix, else the database's own is found."""
    url, from_url = prefix.split_url(url)
    table_prefix = prefix.combine(from_url, table_prefix, url)
    if url.startswith(("postgresql://", "postgres://")):
        creds = url.partition("://")[2].rpartition("@")[0]
        if any(c in creds for c in "@/?#"):
            # libpq would split the password at the first '@' and treat the rest as the host,
            # so the password would end up in its "cannot resolve host" message.
            raise ConfigurationError(
                f"the password in {redact(url)} holds a character that must be percent-encoded "
                "in a URL ('@' as %40, '/' as %2F, '?' as %3F, '#' as %23); e.g. "
                "postgresql://user:p%40ss@host/db"
            )
        try:
            from .postgres import PostgresBackend  # type: ignore[import-not-found, unused-ignore]
        except ImportError as exc:  # the extra is not installed
            raise ConfigurationError(
                f"{redact(url)} needs the PostgreSQL extra: pip install 'errands[postgres]' ({exc})"
            ) from exc
        backend: Backend = PostgresBackend(url, settings, table_prefix)
        return backend
    if "://" not in url and CONNINFO.search(url):
        # Not a file name: a libpq "host=… password=…" string would become a SQLite file
        # named after it (password and all).
        raise ConfigurationError(
            f"{redact(url)!r} looks like a libpq connection string; errands takes a URL: "
            "postgresql://user:password@host:5432/dbname (or a SQLite file path)"
        )
    if "://" in url and not url.startswith("sqlite://"):
        scheme = url.split("://", 1)[0]
        raise ConfigurationError(
            f"unknown database URL scheme {scheme!r}; use a file path, sqlite:///relative.db, "
            "sqlite:////absolute.db or postgresql://user@host/db"
        )
    from .sqlite import SQLiteBackend

    return SQLiteBackend(url, settings, table_prefix)


__all__ = ["Backend", "open_backend", "redact", "scrub", "secrets"]
