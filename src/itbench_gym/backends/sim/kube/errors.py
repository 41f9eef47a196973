"""Kubernetes API errors and their wire form, the ``Status`` object.

Every failure the twin's API reports must look exactly like a real API server's (kubectl prints
``Error from server (NotFound): pods "x" not found`` from ``reason`` and ``message``), so the
constructors below reproduce the upstream message shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class ApiError(Exception):
    """A failed API call; ``status()`` is the ``Status`` object the server sends."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # StatusReasonUnknown ("") is omitted, as ``omitempty`` does upstream
            out["reason"] = self.reason
        out["code"] = self.code
        if self.details is not None:
            out["details"] = self.details
        return out

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _details(name: str | None, group: str, plural: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": plural}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    return out


def qualified(group: str, plural: str) -> str:
    """``deployments.apps`` / ``pods``: how upstream names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(group, plural)} "{name}" not found', _details(name, group, plural)
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, plural)} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}',
        _details(name, group, plural),
    )


def modified_conflict(group: str, plural: str, name: str) -> ApiError:
    return conflict(
        group,
        plural,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """``causes`` are ``(reason, field, message)``, e.g. ``("FieldValueRequired", "spec.containers", "Required value")``."""
    parts = [f"{field}: {msg}" if field else msg for _, field, msg in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
    }
    if group:
        details["group"] = group
    qualified_kind = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def named_entries(items: Any, path: str, causes: list[tuple[str, str, str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The objects of a list field with their paths (``subjects[0]``), noting in ``causes`` an entry that
    is not an object and one without a ``name``, as the API server's validation words them."""
    for i, item in enumerate(items if isinstance(items, list) else []):
        at = f"{path}[{i}]"
        if not isinstance(item, dict):
            causes.append(("FieldValueInvalid", at, "Invalid value: must be an object"))
            continue
        if not item.get("name"):
            causes.append(("FieldValueRequired", f"{at}.name", "Required value"))
        yield at, item


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def forbidden(message: str, group: str = "", plural: str = "", name: str | None = None) -> ApiError:
    return ApiError(403, "Forbidden", message, _details(name, group, plural) if plural else None)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def not_found_path() -> ApiError:
    """What the real server answers for a URL that names no resource."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")


#: etcd's ``ErrNoSpace`` and ``ErrRequestTooLarge``. kube-apiserver passes storage errors it does not
#: recognise through ``convertStorageErrorOrNot``: code 500, reason unknown (empty), etcd's text as
#: the message, so kubectl prints ``Error from server: etcdserver: mvcc: database space exceeded``.
NO_SPACE_MESSAGE = "etcdserver: mvcc: database space exceeded"
REQUEST_TOO_LARGE_MESSAGE = "etcdserver: request is too large"


def too_many_requests(retry_after: int) -> ApiError:
    """API Priority and Fairness rejected the request (its queues are full); sent with ``Retry-After``."""
    return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                    {"retryAfterSeconds": retry_after})


def storage_full() -> ApiError:
    """A write refused because the store's quota (etcd's ``--quota-backend-bytes``) is used up."""
    return ApiError(500, "", NO_SPACE_MESSAGE)


def request_too_large() -> ApiError:
    """A write of one object larger than etcd's ``--max-request-bytes``."""
    return ApiError(500, "", REQUEST_TOO_LARGE_MESSAGE)


def is_storage_error(e: ApiError) -> bool:
    """The store refused the write for space: the writer should retry later, not fail."""
    return e.code == 500 and e.message in (NO_SPACE_MESSAGE, REQUEST_TOO_LARGE_MESSAGE)
