"""What the twin's HTTP APIs (Prometheus, Loki, Jaeger) share: werkzeug routing and its failures."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map
from werkzeug.wrappers import Request, Response


class RoutedApp(ABC):
    """A WSGI app over ``url_map``; subclasses answer matched endpoints in ``handle``."""

    url_map: Map

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self.dispatch(Request(environ))(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        try:
            endpoint, args = self.url_map.bind_to_environ(request.environ).match()
        except NotFound:
            return Response("404 page not found\n", status=404, mimetype="text/plain")
        except MethodNotAllowed as exc:
            return self.method_not_allowed(request, exc)
        except HTTPException as exc:  # redirects for trailing slashes and the like
            return exc.get_response(request.environ)  # type: ignore[return-value]
        return self.handle(request, str(endpoint), args)

    def method_not_allowed(self, request: Request, exc: MethodNotAllowed) -> Response:
        return Response(f"method {request.method} not allowed\n", status=405, mimetype="text/plain", headers=exc.get_headers())

    @abstractmethod
    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        """The response for a matched route."""
