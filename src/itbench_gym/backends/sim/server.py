"""Loopback HTTP(S) servers for the twin's WSGI apps.

One threaded werkzeug server per app on 127.0.0.1 and an ephemeral port, speaking HTTP/1.1 so
watch responses stream with chunked encoding. ``stop()`` closes the listening socket and joins the
serving thread, so an env's ``close()`` leaves nothing behind.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Handler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Request logging would flood the agent's terminal; errors still go to logging."""


class ServerHandle:
    """A running server: ``url``, ``port``, ``stop()``; also a context manager."""

    def __init__(self, server: BaseWSGIServer, scheme: str, app: WSGIApp) -> None:
        self._server = server
        self._app = app
        self.port: int = server.socket.getsockname()[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"itbench-gym-server-{self.port}", daemon=True)
        self._thread.start()
        self._stopped = False

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        close = getattr(self._app, "close", None)
        if callable(close):
            close()  # ends open watches so their request threads finish
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(app: WSGIApp, *, ssl_context: ssl.SSLContext | None = None, port: int = 0) -> ServerHandle:
    """Serve ``app`` on 127.0.0.1 (``port`` 0: an ephemeral port) in a background thread."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=_Handler, ssl_context=ssl_context)
    server.daemon_threads = True  # type: ignore[attr-defined]
    return ServerHandle(server, "https" if ssl_context is not None else "http", app)
