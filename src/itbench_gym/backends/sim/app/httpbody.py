"""What a server does with a request body an HTTPChaos ``patch`` rewrote.

chaos-tproxy merges the experiment's JSON into the request's JSON body (RFC 7396 merge patch) and
forwards it. The server's handler reads fields of the body; a service's ``request_bodies`` entry in
app.yaml gives a typical body the caller sends (``sample``), the fields whose parents the handler
dereferences (``reads``: ``order.order_id`` needs ``order`` to be an object) and how the language
words the failure, so the same patch breaks the server only when it replaces what the code uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from itbench_gym.backends.sim.kube.patch import merge_patch


@dataclass(frozen=True)
class RequestBody:
    sample: dict[str, Any]
    reads: tuple[str, ...]
    #: Template with {field} (the method called) and {receiver} (the value's wording, from ``receivers``).
    message: str
    receivers: dict[str, str]
    log: str
    status: int


def load_bodies(raw: dict[str, Any]) -> dict[str, RequestBody]:
    """A service's app.yaml ``request_bodies`` (validated by app.schema.json)."""
    return {op: RequestBody(dict(b["sample"]), tuple(b["reads"]), str(b["failure"]["message"]), dict(b["failure"]["receivers"]),
                            str(b["failure"]["log"]), int(b["failure"].get("status", 500)))
            for op, b in raw.items()}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def body_failure(body: RequestBody, patch: Any) -> str | None:
    """The handler's error for the sample body merged with ``patch`` (None: it copes)."""
    data = merge_patch(body.sample, patch)
    for path in body.reads:
        *parents, field = path.split(".")
        value: Any = data
        for p in parents:
            value = value.get(p) if isinstance(value, dict) else None
        if not isinstance(value, dict):
            return body.message.format(field=field, receiver=body.receivers.get(_kind(value), _kind(value)))
    return None
