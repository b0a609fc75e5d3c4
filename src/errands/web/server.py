"""Serving the dashboard with uvicorn: in the foreground (``errands dashboard``) or on a
background thread (``errands demo``). The listening socket is bound here, before uvicorn
starts, so a port in use is a one-line error and ``port=0`` gives a free port we can print."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..queue import Queue

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
            "or stop what is using it"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def build(q: Queue, *, host: str, token: str | Mapping[str, str] | None, read_only: bool) -> Any:
    """The app for a standalone server. Without a token (loopback only) the Host header must
    be a loopback name, so a web page cannot reach this server through DNS rebinding."""
    from . import create_app

    hosts = None if token else [*LOOPBACK_NAMES, host]
    return create_app(q, token=token, read_only=read_only, allowed_hosts=hosts)


def uvicorn_server(app: Any) -> Any:
    try:
        import uvicorn
    except ImportError:
        raise ConfigurationError(
            "the dashboard needs uvicorn: pip install 'errands[web]'"
        ) from None
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", server_header=False
    )
    return uvicorn.Server(config)


class Background:
    """A dashboard on a daemon thread; ``stop()`` shuts it down and waits."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        self.sock = sock
        # uvicorn installs signal handlers only on the main thread: the program's own stay.
        self.server = uvicorn_server(app)
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [sock]},
            name="errands-dashboard",
            daemon=True,
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
