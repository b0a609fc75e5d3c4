"""What the dashboard's handlers share (``api.py``, ``pages.py``) and ``app.py`` builds: the
``Dashboard`` each handler is given. A module of its own so that the handlers never import
``app.py``, which imports them."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
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


@cache
def templates() -> Jinja2Templates:
    """The pages' templates, one set per process: a template is compiled once (100-250 ms for
    the overview or the jobs list), not again by each app a process builds. They hold no state
    of a dashboard: what differs per app reaches them in each page's context."""
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
    return Jinja2Templates(env=env)


@cache
def compile_templates() -> None:
    """Compile every template, once per process, when the first app is built (before its
    server answers anything): a page's first view then renders at once instead of compiling
    its template first, and no request shares the CPU with the compiling."""
    env = templates().env
    for name in env.list_templates(extensions=["html"]):
        env.get_template(name)


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
        self.templates = templates()
        compile_templates()
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
