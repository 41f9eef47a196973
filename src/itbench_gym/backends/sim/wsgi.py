"""What the twin's HTTP APIs (Prometheus, Loki, Jaeger) share: werkzeug routing and its failures.

Every request is checked before routing: its path and parameters must be valid UTF-8 (werkzeug
would silently turn bad bytes into U+FFFD) and its body must fit ``max_body_bytes``. A request
that fails gets the app's own 400 (or 413) answer from :meth:`RoutedApp.bad_request`; an
exception escaping a handler gets :meth:`RoutedApp.internal_error` in the app's format, so a client
always receives a well-formed answer.
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

_log = logging.getLogger(__name__)

#: Largest request body read (form-encoded parameters); queries are at most 16 KiB anyway.
MAX_BODY_BYTES = 1 << 20


def _bad_utf8(raw: str) -> bool:
    """Whether a percent-encoded URL component decodes to invalid UTF-8."""
    try:
        unquote_to_bytes(raw.replace("+", " ")).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _invalid_pairs(encoded: str) -> str | None:
    """The name of the first ``name=value`` pair of a query string or form body that is not UTF-8."""
    for pair in encoded.replace(";", "&").split("&"):
        if pair and _bad_utf8(pair):
            name = pair.partition("=")[0]
            return unquote_to_bytes(name.replace("+", " ")).decode("utf-8", "replace")
    return None


def invalid_request_text(request: Request) -> str | None:
    """Why the request's path or parameters are not valid UTF-8 text, or None if they are."""
    environ = request.environ
    raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if isinstance(raw_uri, str):
        path_ok = not _bad_utf8(raw_uri.partition("?")[0])
    else:
        try:
            str(environ.get("PATH_INFO", "")).encode("latin-1").decode("utf-8")
            path_ok = True
        except (UnicodeEncodeError, UnicodeDecodeError):
            path_ok = False
    if not path_ok:
        return "invalid request path: not valid UTF-8"
    name = _invalid_pairs(str(environ.get("QUERY_STRING", "")))
    if name is None and request.mimetype == "application/x-www-form-urlencoded":
        body = request.get_data(cache=True).decode("latin-1")
        name = _invalid_pairs(body)
    if name is not None:
        return f'invalid parameter "{name}": not valid UTF-8'
    return None


#: A route of a :func:`url_map`: its path pattern, endpoint and methods.
Route = tuple[str, str, tuple[str, ...]]


@functools.cache
def url_map(routes: tuple[Route, ...]) -> Map:
    """The routing of ``routes`` (trailing slashes optional), built once per process: compiling the
    rules is most of what a new app costs, and a built map is only read (a twin's apps are made
    again at every reset)."""
    return Map([Rule(path, endpoint=endpoint, methods=list(methods)) for path, endpoint, methods in routes], strict_slashes=False)


class RoutedApp(ABC):
    """A WSGI app over ``url_map``; subclasses answer matched endpoints in ``handle``."""

    url_map: Map
    max_body_bytes = MAX_BODY_BYTES

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self.dispatch(Request(environ))(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        request.max_content_length = self.max_body_bytes
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            return self.bad_request(request, f"request body larger than {self.max_body_bytes} bytes", status=413)
        try:
            problem = invalid_request_text(request)
        except HTTPException as exc:  # a body past max_content_length without a Content-Length
            return self.bad_request(request, exc.description or "request body too large", status=exc.code or 413)
        if problem is not None:
            return self.bad_request(request, problem)
        try:
            endpoint, args = self.url_map.bind_to_environ(request.environ).match()
        except NotFound:
            return Response("404 page not found\n", status=404, mimetype="text/plain")
        except MethodNotAllowed as exc:
            return self.method_not_allowed(request, exc)
        except HTTPException as exc:  # redirects for trailing slashes and the like
            return exc.get_response(request.environ)
        try:
            return self.handle(request, str(endpoint), dict(args))
        except HTTPException as exc:
            return self.bad_request(request, exc.description or str(exc), status=exc.code or 400)
        except Exception as exc:  # a bug must still produce an answer in the API's format
            _log.exception("%s %s failed", request.method, request.path)
            return self.internal_error(request, exc)

    def method_not_allowed(self, request: Request, exc: MethodNotAllowed) -> Response:
        return Response(f"method {request.method} not allowed\n", status=405, mimetype="text/plain", headers=exc.get_headers())

    def bad_request(self, request: Request, message: str, status: int = 400) -> Response:
        """The answer to a request refused before routing; APIs override it with their error shape."""
        return Response(message + "\n", status=status, mimetype="text/plain")

    def internal_error(self, request: Request, exc: Exception) -> Response:
        """The answer when a handler raised unexpectedly; APIs override it with their error shape."""
        return Response(f"internal error: {exc}\n", status=500, mimetype="text/plain")

    @abstractmethod
    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        """The response for a matched route."""
