"""errands' web dashboard and JSON admin API (``pip install 'errands[web]'``).

``create_app(queue, token=…, read_only=…, auth=…)`` returns a Starlette ASGI application to
serve with ``errands dashboard`` or mount inside a FastAPI/Starlette or Django ASGI app. See
docs/dashboard.md for the pages, the API, the security model and mounting recipes.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    from ..errors import ConfigurationError

    raise ConfigurationError(
        f"the dashboard needs the web extra ({exc.name} is missing): pip install 'errands[web]'"
    ) from None

from .app import ROUTES, create_app

__all__ = ["ROUTES", "create_app"]
