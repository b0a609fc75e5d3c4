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

Sessions are signed, not stored: the cookie is ``<random id>.<issued at>.<HMAC(key, id and
time)>``. The key is derived from the token (so sessions survive a restart and work across
processes, and changing the token ends every session), else from ``secret_key``, else random
per process. The server checks the age itself (``session_max_age``, default 7 days), whatever
the browser keeps; logging out revokes the session id in this process until it would have
expired anyway, so a cookie copied before the logout no longer works.

**Identity.** Each request acts as someone (the ``actor`` of the activity log and of the job
events its actions write): the label of the token it proved (``token={"alice": "…"}``; a
browser's session carries the label it logged in with, signed into the session id), else the
user name an ``auth`` callable returned (a string instead of True), else ``api``.

Guessing the token is throttled per client address: after ``MAX_FAILURES`` wrong tokens (login
form or ``Authorization: Bearer``) within ``FAILURE_WINDOW`` seconds, every token attempt from
that address answers 429 until the oldest failure leaves the window.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request

SESSION_COOKIE = "errands_session"
SESSION_MAX_AGE = 7 * 86400
MAX_FAILURES = 5  # wrong tokens from one address within FAILURE_WINDOW before it must wait
FAILURE_WINDOW = 60.0
MAX_TRACKED = 10_000  # addresses remembered by the throttle (oldest forgotten first)

ANONYMOUS = "api"  # the actor when nothing names one: no token, or a token with no label
MAX_LABEL = 64  # characters of a token's label (it is the actor the activity log shows)

# A host application's own check: called with the request, returns True to let it through,
# or the user's name (a non-empty string: let through, and that user is the actor).
AuthCallable = Callable[[Request], bool | str | Awaitable[bool | str]]
# Who the request being handled acts as; set by the app's guard before the handler runs, read
# where the handler calls the Queue (worker threads get a copy of the context).
current_actor: ContextVar[str] = ContextVar("errands_actor", default=ANONYMOUS)


def token_table(token: str | Mapping[str, str] | None) -> dict[str, str | None]:
    """``token=`` as {secret: label}: one string is a token without a label; a mapping is
    ``{label: secret}``, each label the actor of what that token does."""
    if token is None:
        return {}
    if isinstance(token, str):
        if not token:
            raise ValueError("token must be a non-empty string (or None for no token)")
        return {token: None}
    if not isinstance(token, Mapping) or not token:
        raise ValueError(
            "token must be a string, or a mapping of labels to tokens such as "
            "{'alice': 'secret-1', 'deploy-bot': 'secret-2'}"
        )
    table: dict[str, str | None] = {}
    for label, secret in token.items():
        if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL:
            raise ValueError(
                f"token label {label!r:.80} must be a non-empty string of at most "
                f"{MAX_LABEL} characters (it names who acted in the activity log)"
            )
        if not isinstance(secret, str) or not secret:
            raise ValueError(f"the token labelled {label!r} must be a non-empty string")
        if secret in table:
            raise ValueError(f"the token labelled {label!r} is also another label's token")
        table[secret] = label
    return table


class Guard:
    def __init__(
        self,
        *,
        token: str | Mapping[str, str] | None,
        auth: AuthCallable | None,
        secret_key: str | None,
        session_max_age: int = SESSION_MAX_AGE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = token_table(token)
        if self.tokens and auth is not None:
            raise ValueError("give token= or auth=, not both: auth replaces the token")
        # The tokens as one string: what the session key derives from, so changing any token
        # (or a label) ends every session.
        self.token: str | None = (
            token
            if isinstance(token, str)
            else "\n".join(f"{label}\0{secret}" for secret, label in sorted(self.tokens.items()))
            or None
        )
        self.auth = auth
        self.session_max_age = session_max_age
        self.clock = clock
        self.throttle = Throttle()
        self._revoked: dict[str, float] = {}  # session id -> when it would have expired
        if self.token is not None:
            seed = b"errands-dashboard-session:" + self.token.encode()
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

    def new_session(self, label: str | None = None) -> tuple[str, str]:
        """(session id, cookie value); ``label``: the logged-in token's, kept in the id (which
        the cookie's signature covers) so that every process reads who the session is."""
        sid = secrets.token_urlsafe(18)
        if label:
            sid += "~" + label.encode().hex()
        issued = str(int(self.clock()))
        return sid, f"{sid}.{issued}.{self._sign(f'session:{sid}:{issued}')}"

    def _session(self, request: Request) -> tuple[str, float] | None:
        value = request.cookies.get(SESSION_COOKIE, "")
        sid, _, rest = value.partition(".")
        issued, _, sig = rest.partition(".")
        if not sid or not sig or not issued.isdigit() or len(issued) > 12:
            return None
        expected = self._sign(f"session:{sid}:{issued}")
        if not hmac.compare_digest(sig.encode(), expected.encode()):
            return None
        expires = int(issued) + self.session_max_age
        if self.clock() >= expires or sid in self._revoked:
            return None
        return sid, float(expires)

    def session_id(self, request: Request) -> str | None:
        """The session id of a validly signed, unexpired and unrevoked cookie, else None."""
        found = self._session(request)
        return None if found is None else found[0]

    def revoke(self, request: Request) -> None:
        """End the request's session (logout): its cookie is refused from now on."""
        found = self._session(request)
        now = self.clock()
        # Forget revocations of sessions that have expired anyway: the list stays small.
        for sid in [k for k, until in self._revoked.items() if until <= now]:
            del self._revoked[sid]
        if found is not None:
            self._revoked[found[0]] = found[1]

    def session_label(self, request: Request) -> str | None:
        """The label of the token the request's session logged in with, if any."""
        sid = self.session_id(request)
        if sid is None or "~" not in sid:
            return None
        try:
            return bytes.fromhex(sid.split("~", 1)[1]).decode()
        except ValueError:
            return None

    def actor(self, request: Request) -> str:
        """Who the request acts as: what authenticated it named (a token's label, the user an
        auth callable returned), else its session's label, else ``api``."""
        named = getattr(request.state, "errands_actor", None)
        return named or self.session_label(request) or ANONYMOUS

    def csrf_token(self, sid: str) -> str:
        return self._sign("csrf:" + sid)

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        sid = self.session_id(request)
        if sid is None or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), self.csrf_token(sid).encode())

    def token_label(self, candidate: str) -> str | None:
        """The label of the token ``candidate`` is ("" for a token without one), or None if it
        is none of them. Every token is compared, in constant time."""
        found: str | None = None
        for secret, label in self.tokens.items():
            if hmac.compare_digest(candidate.encode(), secret.encode()):
                found = label or ""
        return found

    def bearer_ok(self, request: Request) -> bool:
        if "authorization" not in request.headers:
            return False
        scheme, _, value = request.headers["authorization"].partition(" ")
        label = self.token_label(value.strip()) if scheme.lower() == "bearer" else None
        if label is not None:
            request.state.errands_actor = label or None
            return True
        self.failed(request)
        return False

    def failed(self, request: Request) -> None:
        """A wrong token from this request's address: counted by the throttle."""
        self.throttle.fail(client_key(request), self.clock())

    def wait_seconds(self, request: Request) -> float:
        """How long this request's address must wait before trying a token again (0: now)."""
        return self.throttle.wait(client_key(request), self.clock())

    async def authenticated(self, request: Request) -> bool:
        if self.auth is not None:
            verdict: Any = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if isinstance(verdict, str) and verdict:
                request.state.errands_actor = verdict[:200]
            return bool(verdict)
        if not self.tokens:
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


def client_key(request: Request) -> str:
    return request.client.host if request.client else "?"


class Throttle:
    """Wrong-token attempts per client address over a sliding window (in this process)."""

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def fail(self, key: str, now: float) -> None:
        times = self._recent(key, now)
        times.append(now)
        self._failures[key] = times
        self._failures.move_to_end(key)
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)

    def wait(self, key: str, now: float) -> float:
        times = self._recent(key, now)
        if len(times) < self.limit:
            return 0.0
        return max(times[-self.limit] + self.window - now, 0.0)
