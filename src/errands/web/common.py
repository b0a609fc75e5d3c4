"""What the dashboard's handlers share (``api.py``, ``pages.py``) and ``app.py`` builds: the
``Dashboard`` each handler is given. A module of its own so that the handlers never import
``app.py``, which imports them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from starlette.templating import Jinja2Templates

from .security import Guard

if TYPE_CHECKING:
    from ..queue import Queue

HERE = Path(__file__).parent


class Dashboard:
    """What every handler needs: the queue, the guard, the mode and the templates."""

    def __init__(self, queue: Queue, guard: Guard, *, read_only: bool, title: str) -> None:
        self.queue = queue
        self.guard = guard
        self.read_only = read_only
        self.title = title
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every value from a job is escaped; nothing is marked safe
            undefined=jinja2.StrictUndefined,
        )
        self.templates = Jinja2Templates(env=env)
