"""What the Queue's parts (the mixins in client/) read of the Queue they are part of.

``errands.Queue`` inherits ``Reads`` and ``Actions`` (admin.py) and ``FlowControl``
(flow.py); each is written against this declaration of the attributes ``Queue.__init__``
sets, so a mixin type-checks on its own and the list of what they share stands in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends.verbs import Backend
from ..core.settings import Settings
from ..tasks import Task
from .enqueueing import Producer


class QueueParts:
    """The attributes the Queue's mixins share (set by ``Queue.__init__``)."""

    backend: Backend
    settings: Settings
    clock: Callable[[], float]
    _producer: Producer
    tasks: dict[str, Task[Any, Any]]
