"""chaos-tproxy's handling of HTTPChaos bodies: it parses a JSON patch with serde_json when it loads
the rule (invalid JSON fails the injection with serde's message) and merges it into each selected
JSON body as an RFC 7396 merge patch (``kube.patch.merge_patch``)."""

from __future__ import annotations

import json
from typing import Any

#: Python's json wording -> serde_json's (chaos-tproxy parses the patch with serde_json).
_SERDE = {
    "Expecting property name enclosed in double quotes": "key must be a string",
    "Expecting value": "expected value",
    "Expecting ',' delimiter": "expected `,` or `}`",
    "Expecting ':' delimiter": "expected `:`",
    "Extra data": "trailing characters",
    "Unterminated string starting at": "EOF while parsing a string",
}


def parse_patch(value: str) -> Any:
    """The patch's JSON; ValueError worded as serde_json's error (what chaos-tproxy reports)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"{_SERDE.get(e.msg, e.msg)} at line {e.lineno} column {e.colno}") from None
