"""Backend selection by URL: a path or ``sqlite:///…`` → SQLite; ``postgresql://…`` → PostgreSQL."""

from __future__ import annotations

from ..errors import ConfigurationError
from ..settings import Settings
from .base import Backend


def redact(url: str) -> str:
    """A database URL fit to print or log: any password replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, at, host = rest.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}{at}{host}"


def open_backend(url: str, settings: Settings) -> Backend:
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresBackend  # type: ignore[import-not-found, unused-ignore]
        except ImportError as exc:  # the extra is not installed
            raise ConfigurationError(
                f"{url.split('@')[-1]!r} needs the PostgreSQL extra: "
                f"pip install 'errands[postgres]' ({exc})"
            ) from exc
        backend: Backend = PostgresBackend(url, settings)
        return backend
    if "://" in url and not url.startswith("sqlite://"):
        scheme = url.split("://", 1)[0]
        raise ConfigurationError(
            f"unknown database URL scheme {scheme!r}; use a file path, sqlite:///relative.db, "
            "sqlite:////absolute.db or postgresql://user@host/db"
        )
    from .sqlite import SQLiteBackend

    return SQLiteBackend(url, settings)


__all__ = ["Backend", "open_backend", "redact"]
