"""What the dashboard's handlers share (``api.py``, ``pages.py``) and ``app.py`` builds: the
``Dashboard`` each handler is given. A module of its own so that the handlers never import
``app.py``, which imports them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import jinja2
from starlette.templating import Jinja2Templates

from . import fmt
from .security import Guard

if TYPE_CHECKING:
    from ..queue import Queue

HERE = Path(__file__).parent
T = TypeVar("T")


class Dashboard:
    """What every handler needs: the queue, the guard, the mode and the templates."""

    def __init__(
        self,
        queue: Queue,
        guard: Guard,
        *,
        read_only: bool,
        title: str,
        open_warning: str | None = None,
    ) -> None:
        self.queue = queue
        self.guard = guard
        self.read_only = read_only
        self.title = title
        self.open_warning = open_warning  # shown on every page when anyone may act
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every value from a job is escaped; nothing is marked safe
            undefined=jinja2.StrictUndefined,
        )
        env.globals.update(
            moment=fmt.moment, error_parts=fmt.error_parts, span=fmt.span, name_parts=fmt.name_parts
        )
        env.globals["duration"] = fmt.duration
        env.filters["times"] = fmt.times_in
        self.templates = Jinja2Templates(env=env)
        self._cache: dict[str, tuple[float, Any]] = {}

    def cached(self, key: str, ttl: float, compute: Callable[[], T]) -> T:
        """``compute()``, kept for ``ttl`` seconds: for the 7-day figures, which cost a week of
        minute rows and change little from one live refresh (5 s) to the next."""
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            value: T = hit[1]
            return value
        value = compute()
        self._cache[key] = (now + ttl, value)
        return value

    def forget(self, key: str) -> None:
        """Drop what ``cached`` kept under ``key`` (a figure not worth keeping)."""
        self._cache.pop(key, None)
