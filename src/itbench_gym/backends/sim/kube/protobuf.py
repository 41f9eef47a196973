"""Request bodies in ``application/vnd.kubernetes.protobuf``, decoded to the JSON form of the object.

kubectl's typed clients (imperative ``create configmap|deployment|secret|...``, ``auth can-i``,
``drain``) send protobuf and never fall back to JSON, so the twin has to read it. The envelope is
the magic ``k8s\\x00`` and a ``runtime.Unknown`` (typeMeta{apiVersion=1, kind=2}=1, raw=2,
contentEncoding=3, contentType=4); ``raw`` is the object in protobuf wire format. Field numbers,
JSON names and types per message live in ``protobuf_types.yaml`` (facts from upstream's
``generated.proto``). Responses stay JSON, which every client accepts.

The JSON produced is what the Go types would marshal: zero scalars are dropped unless the field is
marked ``keep`` (a pointer, or no ``omitempty``), inline messages merge into their parent, unknown
fields are skipped. Malformed input raises ``ProtobufError`` naming the message and field.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from itbench_gym.lang import yamltext
from itbench_gym.lang.timestamps import rfc3339

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_SCALARS = frozenset({"string", "bytes", "bool", "int32", "int64"})
#: apimachinery types whose wire layout is fixed and whose JSON form is a scalar.
_SPECIAL = frozenset({"time", "quantity", "intorstring", "rawjson"})


class ProtobufError(ValueError):
    """The body is not a protobuf object the twin can read; the message says what and where."""


@dataclass(frozen=True)
class FieldSpec:
    number: int
    name: str
    type: str  # scalar, special or message name; for maps the value type
    repeated: bool = False
    map: bool = False
    keep: bool = False
    inline: bool = False


@dataclass(frozen=True)
class Schema:
    kinds: dict[str, str]  # "apiVersion/kind" (or "*/kind") -> message
    messages: dict[str, dict[int, FieldSpec]]


def _parse_field(message: str, number: int, text: str) -> FieldSpec:
    parts = str(text).split()
    if len(parts) < 2 or any(f not in ("keep", "inline") for f in parts[2:]):
        raise ValueError(f"protobuf_types.yaml: {message} field {number}: expected '<name> <type> [keep] [inline]', "
                         f"got {text!r}")
    name, typ, flags = parts[0], parts[1], set(parts[2:])
    repeated = typ.startswith("[]")
    is_map = typ.startswith("map<")
    if repeated:
        typ = typ[2:]
    elif is_map:
        key, _, value = typ[4:-1].partition(",")
        if key != "string" or not typ.endswith(">"):
            raise ValueError(f"protobuf_types.yaml: {message} field {number}: only map<string,T> is supported")
        typ = value
    return FieldSpec(number, name, typ, repeated, is_map, "keep" in flags, "inline" in flags)


@lru_cache(maxsize=1)
def schema() -> Schema:
    """The field table, loaded and checked once (every referenced message must be defined)."""
    doc = yamltext.load(resources.files(__package__).joinpath("protobuf_types.yaml").read_text())
    messages = {name: {int(n): _parse_field(name, int(n), spec) for n, spec in (fields or {}).items()}
                 for name, fields in doc["messages"].items()}
    for name, fields in messages.items():
        for f in fields.values():
            if f.type not in _SCALARS and f.type not in _SPECIAL and f.type not in messages:
                raise ValueError(f"protobuf_types.yaml: {name}.{f.name} refers to undefined message {f.type}")
    kinds = {str(k): str(v) for k, v in doc["kinds"].items()}
    for key, message in kinds.items():
        if message not in messages:
            raise ValueError(f"protobuf_types.yaml: kind {key} refers to undefined message {message}")
    return Schema(kinds, messages)


def decode(raw: bytes) -> dict[str, Any]:
    """The object in a protobuf request body, as the JSON document the same request would carry."""
    if not raw.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic number 6b 38 73 00")
    envelope: dict[int, Any] = {}
    for number, wire, value in _fields(raw[len(MAGIC):], "runtime.Unknown"):
        if number in (1, 2, 3, 4) and wire == _LEN:
            envelope[number] = value
    type_meta: dict[int, str] = {}
    for number, wire, value in _fields(envelope.get(1, b""), "runtime.TypeMeta"):
        if number in (1, 2) and wire == _LEN:
            type_meta[number] = _text(value, "runtime.TypeMeta." + ("apiVersion" if number == 1 else "kind"))
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    encoding = _text(envelope.get(3, b""), "runtime.Unknown.contentEncoding")
    if encoding:
        raise ProtobufError(f"content encoding {encoding!r} is not supported")
    if not kind:
        raise ProtobufError("the runtime.Unknown envelope names no kind")
    table = schema()
    message = table.kinds.get(f"{api_version}/{kind}") or table.kinds.get(f"*/{kind}")
    if message is None:
        raise ProtobufError(f"no protobuf decoding for {kind} in {api_version or 'the core group'}; "
                            "send it as application/json")
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind} if api_version else {"kind": kind}
    out.update(_message(envelope.get(2, b""), message, table))
    return out


# -- wire format ------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError(f"{where}: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError(f"{where}: varint longer than 10 bytes")


def _fields(buf: bytes, where: str) -> list[tuple[int, int, Any]]:
    """``(number, wire type, value)`` of every field; values are ints (varint/fixed) or bytes."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError(f"{where}: invalid field number 0")
        value: Any
        if wire == _VARINT:
            value, pos = _varint(buf, pos, f"{where} field {number}")
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if pos + size > len(buf):
                raise ProtobufError(f"{where} field {number}: truncated fixed-width value")
            value, pos = int.from_bytes(buf[pos:pos + size], "little"), pos + size
        elif wire == _LEN:
            size, pos = _varint(buf, pos, f"{where} field {number}")
            if pos + size > len(buf):
                raise ProtobufError(f"{where} field {number}: length {size} runs past the end of the message")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ProtobufError(f"{where} field {number}: unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _text(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"{where}: string is not valid UTF-8") from None


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


# -- messages ---------------------------------------------------------------------------------------


def _message(buf: bytes, name: str, table: Schema) -> dict[str, Any]:
    specs = table.messages[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(buf, name):
        f = specs.get(number)
        if f is None:
            continue  # a field this twin does not know: skipped, as upstream skips unknown fields
        where = f"{name}.{f.name}"
        if f.map:
            if wire != _LEN:
                raise ProtobufError(f"{where}: map entry must be length-delimited")
            key, item = _map_entry(value, f, table, where)
            out.setdefault(f.name, {})[key] = item
            continue
        if f.repeated and wire == _LEN and f.type in ("bool", "int32", "int64"):
            items = _packed(value, f.type, where)  # packed encoding of repeated numbers
            out.setdefault(f.name, []).extend(items)
            continue
        item = _value(wire, value, f.type, table, where)
        if f.repeated:
            out.setdefault(f.name, []).append(item)
        elif f.inline and isinstance(item, dict):
            out.update(item)
        elif item is None or (f.type in _SCALARS and not item and not f.keep):
            out.pop(f.name, None)
        else:
            out[f.name] = item
    return out


def _map_entry(buf: bytes, f: FieldSpec, table: Schema, where: str) -> tuple[str, Any]:
    key, item = "", None
    for number, wire, value in _fields(buf, where):
        if number == 1:
            if wire != _LEN:
                raise ProtobufError(f"{where}: map key must be a string")
            key = _text(value, f"{where} key")
        elif number == 2:
            item = _value(wire, value, f.type, table, f"{where}[{key}]")
    if item is None:
        item = {"string": "", "bytes": "", "bool": False, "int32": 0, "int64": 0}.get(f.type)
    return key, item


def _packed(buf: bytes, typ: str, where: str) -> list[Any]:
    out: list[Any] = []
    pos = 0
    while pos < len(buf):
        v, pos = _varint(buf, pos, where)
        out.append(bool(v) if typ == "bool" else _signed(v))
    return out


def _value(wire: int, value: Any, typ: str, table: Schema, where: str) -> Any:
    if typ in ("bool", "int32", "int64"):
        if wire != _VARINT:
            raise ProtobufError(f"{where}: expected a varint for {typ}, got wire type {wire}")
        return bool(value) if typ == "bool" else _signed(value)
    if wire != _LEN:
        raise ProtobufError(f"{where}: expected a length-delimited {typ}, got wire type {wire}")
    if typ == "string":
        return _text(value, where)
    if typ == "bytes":
        return base64.b64encode(value).decode("ascii")
    if typ == "time":
        return _time(value, where)
    if typ == "quantity":
        fields = {n: v for n, w, v in _fields(value, where) if w == _LEN}
        return _text(fields.get(1, b""), where)
    if typ == "intorstring":
        return _int_or_string(value, where)
    if typ == "rawjson":
        return _raw_json(value, where)
    return _message(value, typ, table)


def _time(buf: bytes, where: str) -> str | None:
    """``metav1.Time``: seconds since the epoch; an empty message is the zero time (omitted)."""
    seconds = None
    for number, wire, value in _fields(buf, where):
        if number == 1 and wire == _VARINT:
            seconds = _signed(value)
    return None if seconds is None else rfc3339(seconds)


def _int_or_string(buf: bytes, where: str) -> int | str:
    kind, int_val, str_val = 0, 0, ""
    for number, wire, value in _fields(buf, where):
        if number == 1 and wire == _VARINT:
            kind = value
        elif number == 2 and wire == _VARINT:
            int_val = _signed(value)
        elif number == 3 and wire == _LEN:
            str_val = _text(value, where)
    return str_val if kind == 1 else int_val


def _raw_json(buf: bytes, where: str) -> Any:
    raw = b""
    for number, wire, value in _fields(buf, where):
        if number == 1 and wire == _LEN:
            raw = value
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProtobufError(f"{where}: raw field is not JSON ({e})") from None
