"""``errands dashboard``: serve the web dashboard and JSON admin API with uvicorn.

Binds 127.0.0.1 by default. Any other address needs a token (``--token``,
``$ERRANDS_DASHBOARD_TOKEN``, or labelled ones in ``$ERRANDS_DASHBOARD_TOKENS``): without
one, anyone who can reach the port could retry, cancel and prune jobs, so that is refused as
bad usage (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from .common import UsageError, add_db, open_queue

ENV_TOKEN = "ERRANDS_DASHBOARD_TOKEN"
# Several tokens, each with the label that names who acted (the activity log): pairs
# "LABEL=TOKEN" separated by commas or whitespace, kept out of ``ps`` like the one token.
ENV_TOKENS = "ERRANDS_DASHBOARD_TOKENS"


def labelled_tokens(text: str) -> dict[str, str]:
    """``$ERRANDS_DASHBOARD_TOKENS`` as {label: token}; bad usage (exit 2) if malformed."""
    tokens: dict[str, str] = {}
    for pair in text.replace(",", " ").split():
        label, sep, token = pair.partition("=")
        if not sep or not label or not token:
            raise UsageError(
                f"${ENV_TOKENS} holds {pair[:20]!r}…: write LABEL=TOKEN pairs separated by "
                "commas or spaces, e.g. alice=3f9c…,deploy-bot=a71e…"
            )
        if label in tokens:
            raise UsageError(f"${ENV_TOKENS} names the label {label!r} twice")
        tokens[label] = token
    return tokens


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535 (0: any free port), got {value}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dashboard",
        help="serve the web dashboard and JSON admin API",
        description="Serve the web dashboard (overview, jobs, failures, periodic, workers) and "
        "the JSON admin API at /api/admin/… with uvicorn. Needs `pip install 'errands[web]'`. "
        "See docs/dashboard.md.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other needs --token)",
    )
    p.add_argument(
        "--port", type=port_number, default=8000, help="port (default 8000; 0: any free port)"
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"require this token: a login form for browsers, 'Authorization: Bearer' for the "
        f"API (default: ${ENV_TOKEN}, else the labelled LABEL=TOKEN pairs of ${ENV_TOKENS}, "
        "each label naming who acted in the activity log; else none)",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="refuse every change (retry, cancel, prune) with 403",
    )
    add_db(p)
    p.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..web.server import bind, build, is_loopback, url_of, uvicorn_server

    token: str | Mapping[str, str] | None = args.token or os.environ.get(ENV_TOKEN) or None
    if token is None and os.environ.get(ENV_TOKENS, "").strip():
        token = labelled_tokens(os.environ[ENV_TOKENS])
    if not is_loopback(args.host) and token is None:
        raise UsageError(
            f"refusing to serve the dashboard on {args.host} without a token: anyone who can "
            f"reach it could change jobs; pass --token T (or set ${ENV_TOKEN}), or use "
            "--host 127.0.0.1"
        )
    with open_queue(args, must_exist=True) as q:
        server = uvicorn_server(build(q, host=args.host, token=token, read_only=args.read_only))
        sock = bind(args.host, args.port)
        how = "log in with the token" if token else "no token: loopback only"
        mode = ", read-only" if args.read_only else ""
        print(f"errands dashboard: {url_of(sock, args.host)} ({how}{mode}; Ctrl-C to stop)")
        print(f"  database: {q.display_url}")
        sys.stdout.flush()
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        finally:
            sock.close()
    return 0
