"""Who may use the dashboard, and how a request proves it did not come from another site.

- **Authentication.** With a ``token``: a browser logs in once through a form that sets a
  signed, HttpOnly, ``SameSite=Strict`` session cookie; API clients send
  ``Authorization: Bearer <token>``. Both compare in constant time. With a host application's
  ``auth`` callable instead, that callable decides (the token is not used). With neither, the
  dashboard trusts whoever can reach it — which is why the CLI only allows that on loopback.
- **CSRF.** HTML forms carry a token derived from the session (an HMAC of the session id);
  JSON API mutations must be requests a cross-site form cannot send (``Content-Type:
  application/json`` or an ``X-Requested-With`` header). Every mutation whose ``Origin``
  header is present must name the dashboard's own host.

Sessions are stateless: the cookie is ``<random id>.<HMAC(key, id)>``. The key is derived from
the token (so sessions survive a restart and work across processes, and changing the token
logs everyone out), else from ``secret_key``, else random per process.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

SESSION_COOKIE = "errands_session"
SESSION_MAX_AGE = 7 * 86400

# A host application's own check: called with the request, returns True to let it through.
AuthCallable = Callable[[Request], bool | Awaitable[bool]]


class Guard:
    def __init__(
        self, *, token: str | None, auth: AuthCallable | None, secret_key: str | None
    ) -> None:
        if token is not None and not token:
            raise ValueError("token must be a non-empty string (or None for no token)")
        if token is not None and auth is not None:
            raise ValueError("give token= or auth=, not both: auth replaces the token")
        self.token = token
        self.auth = auth
        if token is not None:
            seed = b"errands-dashboard-session:" + token.encode()
            self._key = hashlib.sha256(seed).digest()
        elif secret_key:
            self._key = hashlib.sha256(b"errands-dashboard-key:" + secret_key.encode()).digest()
        else:
            self._key = secrets.token_bytes(32)

    @property
    def uses_login(self) -> bool:
        """Whether the browser must log in with the token (no host auth takes its place)."""
        return self.token is not None

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> tuple[str, str]:
        """(session id, cookie value)."""
        sid = secrets.token_urlsafe(18)
        return sid, f"{sid}.{self._sign('session:' + sid)}"

    def session_id(self, request: Request) -> str | None:
        """The session id of a validly signed cookie, else None."""
        value = request.cookies.get(SESSION_COOKIE, "")
        sid, _, sig = value.partition(".")
        if not sid or not sig:
            return None
        if not hmac.compare_digest(sig.encode(), self._sign("session:" + sid).encode()):
            return None
        return sid

    def csrf_token(self, sid: str) -> str:
        return self._sign("csrf:" + sid)

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        sid = self.session_id(request)
        if sid is None or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), self.csrf_token(sid).encode())

    def token_ok(self, candidate: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())

    async def authenticated(self, request: Request) -> bool:
        if self.auth is not None:
            verdict: Any = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)
        if self.token is None:
            return True
        return self.bearer_ok(request) or self.session_id(request) is not None


def same_origin(request: Request) -> bool:
    """True when the request has no ``Origin`` header or it names this server's host and port.

    The scheme is not compared: behind a TLS-terminating proxy the app may see ``http`` while
    the browser says ``https``. A cross-site page cannot make a browser send another site's
    host as its Origin, so the host alone decides."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    _, sep, netloc = origin.partition("://")
    return bool(sep) and netloc.lower() == request.url.netloc.lower()


def non_simple(request: Request) -> bool:
    """A request a cross-site HTML form cannot make: JSON content type or X-Requested-With."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype == "application/json" or "x-requested-with" in request.headers
