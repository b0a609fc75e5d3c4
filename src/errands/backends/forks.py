"""Which process this is: ``os.fork()`` (a handler's, or an application's) makes a child that
inherits errands' objects but must not use what they hold — another process's connections,
its worker's jobs. Every fork bumps ``generation`` in the child; an object remembers the
generation it was made in and compares (a module attribute read, no system call)."""

from __future__ import annotations

import os

generation = 0


def _in_child() -> None:
    global generation
    generation += 1


os.register_at_fork(after_in_child=_in_child)
