"""The twin's HTTP APIs answered in-process for the harness's own requests.

The harness asks Prometheus for the alerts after every step and polls its rules while an incident
develops. Those requests need no socket on the twin: the served app is a WSGI callable in the same
process, so a ``requests`` transport can hand it the request and read its answer directly (the
same app, the same bytes, no TCP round trip or server thread). The agent's tools still go through
the served endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers
from werkzeug.test import EnvironBuilder, run_wsgi_app

from itbench_gym.backends.sim.server import WSGIApp


class WSGITransport(BaseAdapter):
    """A ``requests`` transport that calls one WSGI app for every request sent through it."""

    def __init__(self, app: WSGIApp) -> None:
        super().__init__()
        self._app = app

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Any = None) -> requests.Response:
        url = urlsplit(request.url or "")
        body = request.body.encode("utf-8") if isinstance(request.body, str) else request.body or b""
        environ = EnvironBuilder(path=url.path or "/", base_url=f"{url.scheme}://{url.netloc}", query_string=url.query,
                                 method=request.method or "GET", headers=list(request.headers.items()), data=body).get_environ()
        app_iter, status, headers = run_wsgi_app(self._app, environ)
        try:
            content = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
        response = requests.Response()
        code, _, reason = status.partition(" ")
        response.status_code, response.reason = int(code), reason
        response.headers = CaseInsensitiveDict(headers.items())
        response.encoding = get_encoding_from_headers(response.headers)
        response._content = content
        response.url, response.request = request.url or "", request
        return response

    def close(self) -> None:
        """Nothing to release: no connection was opened."""


def in_process_session(apps: Mapping[str, WSGIApp]) -> requests.Session:
    """A session that sends requests under each base URL of ``apps`` to its app in-process (any other
    URL goes out over the network, directly: the environment's proxy and netrc settings are not read,
    as none applies to an in-process call and looking them up is a third of what a call costs)."""
    session = requests.Session()
    session.trust_env = False
    for base, app in apps.items():
        session.mount(base.rstrip("/") + "/", WSGITransport(app))
    return session
