"""The twin's HTTP APIs answered in-process for the harness's own requests.

The harness asks Prometheus for the alerts after every step, polls its rules while an incident
develops, and injects faults and reads the cluster through its admin Kubernetes client. Those
requests need no socket on the twin: the served apps are WSGI callables in the same process, so a
``requests`` transport (:class:`WSGITransport`) or a stand-in for the ``kubernetes`` client's
connection pool (:class:`WSGIPoolManager`) can hand an app the request and read its answer directly
(the same app, the same bytes, no TLS, TCP round trip or server thread). The agent's tools still go
through the served endpoints.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import requests
import urllib3
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers
from urllib3.filepost import encode_multipart_formdata
from werkzeug.test import EnvironBuilder, run_wsgi_app

from itbench_gym.backends.sim.server import WSGIApp


def call_app(app: WSGIApp, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | str | None
             ) -> tuple[int, str, list[tuple[str, str]], bytes]:
    """Send one request to ``app``: its status code, reason, headers and whole body (a streamed answer
    is read to its end)."""
    parts = urlsplit(url)
    data = body.encode("utf-8") if isinstance(body, str) else body or b""
    environ = EnvironBuilder(path=parts.path or "/", base_url=f"{parts.scheme}://{parts.netloc}", query_string=parts.query,
                             method=method, headers=list(headers), data=data).get_environ()
    app_iter, status, response_headers = run_wsgi_app(app, environ)
    try:
        content = b"".join(app_iter)
    finally:
        close = getattr(app_iter, "close", None)
        if close is not None:
            close()
    code, _, reason = status.partition(" ")
    return int(code), reason, list(response_headers.items()), content


class WSGITransport(BaseAdapter):
    """A ``requests`` transport that calls one WSGI app for every request sent through it."""

    def __init__(self, app: WSGIApp) -> None:
        super().__init__()
        self._app = app

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Any = None) -> requests.Response:
        code, reason, headers, content = call_app(self._app, request.method or "GET", request.url or "",
                                                  request.headers.items(), request.body)
        response = requests.Response()
        response.status_code, response.reason = code, reason
        response.headers = CaseInsensitiveDict(headers)
        response.encoding = get_encoding_from_headers(response.headers)
        response._content = content
        response.url, response.request = request.url or "", request
        return response

    def close(self) -> None:
        """Nothing to release: no connection was opened."""


class WSGIPoolManager:
    """What the ``kubernetes`` client's REST layer sends its requests through (its ``pool_manager``),
    calling one WSGI app for each and answering with a urllib3 response, as urllib3's pool would."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def request(self, method: str, url: str, fields: Any = None, headers: Mapping[str, str] | None = None, body: Any = None,
                *, encode_multipart: bool = True, preload_content: bool = True, **_: Any) -> urllib3.HTTPResponse:
        """urllib3's ``request``: ``fields`` go into the query of a GET, HEAD or DELETE, else into a form body."""
        sent = dict(headers or {})
        if fields and method.upper() in ("GET", "HEAD", "DELETE"):
            url += ("&" if urlsplit(url).query else "?") + urlencode(fields)
        elif fields:
            if encode_multipart:
                body, sent["Content-Type"] = encode_multipart_formdata(fields)
            else:
                body, sent["Content-Type"] = urlencode(fields), "application/x-www-form-urlencoded"
        code, reason, response_headers, content = call_app(self._app, method, url, sent.items(), body)
        return urllib3.HTTPResponse(body=io.BytesIO(content), headers=urllib3.HTTPHeaderDict(response_headers), status=code,
                                    reason=reason, preload_content=preload_content, request_method=method, request_url=url)

    def clear(self) -> None:
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
