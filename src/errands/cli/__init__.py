"""The ``errands`` command line (filled in by the CLI work)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    raise SystemExit("errands CLI: not built yet")
