"""curl, as far as the twin knows what happens: DNS, the connection, and an HTTP request's status and
time as the app model answers it (``traces/exchange.py``).

What an agent's curl most often asks is fully answered: ``curl -s -o /dev/null -w '%{http_code}' URL``
(the status, or ``000`` and curl's exit code when no answer came), ``curl -sf URL`` failing on an error
status, ``-m``/``--connect-timeout`` timing out behind a slow or silent server. A response's body is
printed where the twin knows it (the frontend's product API, flagd's OFREP answers), with the request's
body from the data options; the other bodies and every response's headers are not modelled: where
curl would print them (no ``-o /dev/null``, ``-I``, ``-i``) the twin says so and exits 126, as for any
exchange it does not model. The messages are curl's own (``curl:
(7) Failed to connect to ...``), in the wording of the release the image holds (the registry's
``versions``: "Couldn't connect to server" before 8.9, "Could not connect to server" since).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from .context import ExecResult, HttpAnswer
from .netclients import UNMODELLED_CONTENT, UNMODELLED_EXCHANGE, UNMODELLED_NETWORK

if TYPE_CHECKING:
    from .programs import Invocation

_FLAGS = "sSfLkIi\x01\x02\x03"
_VALUED = "owXdHmA\x04\x05\x06\x07"
_LONGS = {"silent": "s", "show-error": "S", "fail": "f", "location": "L", "insecure": "k", "head": "I", "include": "i",
          "output": "o", "write-out": "w", "request": "X", "data": "d", "data-ascii": "d", "data-raw": "\x06",
          "data-binary": "\x07", "header": "H", "max-time": "m", "user-agent": "A", "no-progress-meter": "\x01",
          "compressed": "\x02", "http1.1": "\x03", "connect-timeout": "\x04", "data-urlencode": "\x05"}
#: The options whose values make the request's body, joined with ``&`` in the order given.
_DATA = "d\x05\x06\x07"
#: Linux's connect timeout when nothing answers a SYN: tcp_syn_retries 6, the first retransmission after
#: 1 s and each later one after twice as long (1 + 2 + ... + 64 s).
_KERNEL_CONNECT_TIMEOUT_MS = 127_000
_DISCARDED = ("/dev/null",)
#: ``-w`` variables the twin can fill; the others curl knows need the response's headers or body.
_KNOWN_VARIABLES = {"http_code", "response_code", "time_total", "time_starttransfer", "time_connect", "time_namelookup",
                    "remote_ip", "remote_port", "url_effective", "url", "method", "exitcode", "errormsg", "num_connects",
                    "http_version", "scheme"}
_UNKNOWN_TO_TWIN = {"size_download", "size_header", "size_request", "size_upload", "speed_download", "speed_upload",
                    "content_type", "header_json", "redirect_url", "num_redirects", "filename_effective", "stderr", "stdout",
                    "json", "onerror", "ssl_verify_result", "local_ip", "local_port", "time_appconnect", "time_pretransfer",
                    "time_redirect", "proxy_ssl_verify_result", "num_headers", "certs", "num_certs", "ftp_entry_path",
                    "http_connect", "proxy_used", "referer", "urlnum", "conn_id", "xfer_id", "time_queue", "time_posttransfer"}


@dataclass
class _Transfer:
    """What the write-out variables read once the transfer ended."""

    url: str
    method: str
    host: str = ""
    scheme: str = ""
    ip: str = ""
    port: int = 0
    status: int = 0
    seconds: float = 0.0
    code: int = 0
    error: str = ""
    #: the response's body and content type, where the twin knows them
    body: bytes | None = None
    content_type: str | None = None


def _connect_words(inv: Invocation) -> str:
    """curl's strerror for CURLE_COULDNT_CONNECT in the image's release (reworded in 8.9)."""
    version = tuple(int(p) for p in inv.container.versions.get("curl", "99").split("."))
    return "Couldn't connect to server" if version < (8, 9) else "Could not connect to server"


def curl(inv: Invocation) -> ExecResult:
    """curl [-sSfLkIi] [-o FILE] [-w FORMAT] [-X METHOD] [-d DATA] [-H HEADER] [-m SEC] [--connect-timeout SEC] URL."""
    from .programs import Usage, getopt, usage_error

    try:
        opts, operands = getopt(inv, _FLAGS, _VALUED, _LONGS)
    except Usage as bad:
        return usage_error(inv, str(bad), _FLAGS, _VALUED, 2, _LONGS)
    given = {letter for letter, _ in opts}

    def value(letter: str) -> str | None:
        return next((v for k, v in reversed(opts) if k == letter), None)

    if not operands:
        inv.err += b"curl: no URL specified\ncurl: try 'curl --help' or 'curl --manual' for more information\n"
        return inv.done(2)
    if len(operands) > 1:
        inv.say("the itbench_gym twin's curl fetches one URL at a time")
        return inv.done(2)
    limits = []
    for letter, name in (("m", "max-time"), ("\x04", "connect-timeout")):
        raw = value(letter)
        if raw is not None:
            if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", raw):
                inv.err += f"curl: option --{name}: expected a proper numerical parameter\ncurl: try 'curl --help' or 'curl --manual' for more information\n".encode()
                return inv.done(2)
            limits.append((letter, float(raw)))
    max_time = next((v for k, v in limits if k == "m"), None)
    connect_limit = min((v for _, v in limits), default=None)
    url = operands[0] if "://" in operands[0] else f"http://{operands[0]}"
    method = value("X") or ("HEAD" if "I" in given else "POST" if given & set(_DATA) else "GET")
    body = _request_body(inv, [(k, v) for k, v in opts if k in _DATA])
    if body is None:
        return inv.done(126)
    transfer = _Transfer(url, method)
    shows_errors = "s" not in given or "S" in given

    def end(code: int, message: str) -> ExecResult:
        transfer.code, transfer.error = code, message
        if message and shows_errors:
            inv.err += f"curl: ({code}) {message}\n".encode()
        return _write_out(inv, value("w"), transfer) or inv.done(code)

    if "s" not in given and "\x01" not in given:
        inv.err += b"itbench_gym: curl's progress meter (the transfer's sizes and speeds) is not shown by the twin\n"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return end(3, "URL rejected: Port number was not a decimal number between 0 and 65535")
    transfer.host, transfer.scheme = parts.hostname or "", parts.scheme
    if parts.scheme not in ("http", "https") or not parts.hostname:
        inv.say(f"{parts.scheme}: {UNMODELLED_EXCHANGE}" if parts.hostname else f"{operands[0]}: not an http or https URL")
        return inv.done(126 if parts.hostname else 3)
    port = port or (443 if parts.scheme == "https" else 80)
    network = inv.container.network
    if network is None:
        inv.say("the itbench_gym twin does not model this pod's network")
        return inv.done(1)
    found = network.lookup(parts.hostname)
    if found.error == "unmodelled":
        inv.say(f"{parts.hostname}: {UNMODELLED_NETWORK}")
        return inv.done(1)
    if found.error == "timeout" and connect_limit is not None:
        return end(28, f"Resolving timed out after {_ms(connect_limit)} milliseconds")
    if found.error is not None:
        return end(6, f"Could not resolve host: {parts.hostname}")
    transfer.ip, transfer.port = found.addresses[0], port
    dial = network.dial(transfer.ip, port)
    if dial.outcome == "unmodelled":
        inv.say(f"{parts.hostname} ({transfer.ip}:{port}): {UNMODELLED_NETWORK}")
        return inv.done(1)
    if dial.outcome == "refused":
        return end(7, f"Failed to connect to {parts.hostname} port {port} after 0 ms: {_connect_words(inv)}")
    if dial.outcome == "timeout":
        if connect_limit is not None:
            return end(28, f"Connection timed out after {_ms(connect_limit)} milliseconds")
        return end(28, f"Failed to connect to {parts.hostname} port {port} after {_KERNEL_CONNECT_TIMEOUT_MS} ms: {_connect_words(inv)}")
    if dial.outcome == "reset":
        return end(56, "Recv failure: Connection reset by peer")
    answer = network.request(transfer.ip, port, "GET" if method == "HEAD" else method,
                             (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body)
    if answer is None:
        inv.err += f"itbench_gym: curl connected to {parts.hostname} ({transfer.ip}:{port}); {UNMODELLED_EXCHANGE}\n".encode()
        return inv.done(126)
    return _answered(inv, answer, transfer, given, value("o"), max_time, end)


def _answered(inv: Invocation, answer: HttpAnswer, transfer: _Transfer, given: set[str], output: str | None,
              max_time: float | None, end: Callable[[int, str], ExecResult]) -> ExecResult:
    """The transfer once the server answers (or resets, or takes longer than ``-m``)."""
    if max_time is not None and answer.seconds > max_time:
        transfer.seconds = max_time
        return end(28, f"Operation timed out after {_ms(max_time)} milliseconds with 0 bytes received")
    if answer.status is None:
        return end(56, "Recv failure: Connection reset by peer")
    transfer.status, transfer.seconds = answer.status, answer.seconds
    transfer.body, transfer.content_type = answer.body, answer.content_type
    if "f" in given and answer.status >= 400:
        return end(22, f"The requested URL returned error: {answer.status}")
    if answer.body is not None and output is None and not given & {"i", "I"}:
        inv.write(answer.body)
        return end(0, "")
    if output not in _DISCARDED or "i" in given:
        inv.err += (f"itbench_gym: curl got HTTP/1.1 {answer.status} from {transfer.host} "
                    f"({transfer.ip}:{transfer.port}); {UNMODELLED_CONTENT}\n").encode()
        return inv.done(126)
    return end(0, "")


def _request_body(inv: Invocation, data: list[tuple[str, str]]) -> bytes | None:
    """The body the data options make (``-d @FILE`` read with its line ends dropped, ``--data-binary
    @FILE`` as it is, ``--data-raw`` literally, ``--data-urlencode`` percent-encoded); None after saying
    what the twin cannot read."""
    from .programs import UNMODELLED, stat

    parts: list[bytes] = []
    for letter, raw in data:
        if letter == "\x05":
            name, sep, text = raw.partition("=")
            if not sep and "@" in raw:
                inv.say(f"--data-urlencode {raw}: reading a file for it is not emulated by the itbench_gym twin")
                return None
            parts.append((f"{name}=" if sep and name else "").encode("utf-8", "surrogateescape")
                         + quote(text if sep else raw, safe="", errors="surrogateescape").encode())
        elif letter in "d\x07" and raw.startswith("@"):
            found = stat(inv.container, inv.path(raw[1:]), inv.stdin) if raw != "@-" else None
            if found is not None and found.kind != "file":
                inv.say(f"{raw[1:]}: {UNMODELLED if found.kind == 'unmodelled' else 'not a file the twin can read for curl'}")
                return None
            content = inv.stdin if found is None else found.data
            parts.append(content.replace(b"\r", b"").replace(b"\n", b"") if letter == "d" else content)
        else:
            parts.append(raw.encode("utf-8", "surrogateescape"))  # an argument's bytes as the kernel passed them
    return b"&".join(parts)


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _write_out(inv: Invocation, fmt: str | None, transfer: _Transfer) -> ExecResult | None:
    """``-w FORMAT`` written to stdout after the transfer (curl's ``\\n``-style escapes and ``%{name}``
    variables); an ExecResult instead when a variable needs what the twin does not model."""
    if fmt is None:
        return None
    if fmt.startswith("@"):
        inv.say(f"{fmt}: reading the --write-out format from a file is not emulated by the itbench_gym twin")
        return inv.done(126)
    values = {
        "http_code": f"{transfer.status:03d}", "response_code": f"{transfer.status:03d}",
        "time_total": f"{transfer.seconds:.6f}", "time_starttransfer": f"{transfer.seconds:.6f}" if transfer.status else "0.000000",
        "time_connect": "0.000000", "time_namelookup": "0.000000", "remote_ip": transfer.ip,
        "remote_port": str(transfer.port) if transfer.ip else "0", "url_effective": transfer.url, "url": transfer.url,
        "method": transfer.method, "exitcode": str(transfer.code), "errormsg": transfer.error,
        "num_connects": "1" if transfer.ip else "0", "http_version": "1.1" if transfer.status else "0",
        "scheme": transfer.scheme.upper() if transfer.status else "",
    }
    out: list[str] = []
    i = 0
    while i < len(fmt):
        if fmt.startswith("%{", i) and "}" in fmt[i:]:
            name = fmt[i + 2:fmt.index("}", i)]
            if name in ("size_download", "content_type") and transfer.body is not None:
                out.append(str(len(transfer.body)) if name == "size_download" else transfer.content_type or "")
            elif name in _UNKNOWN_TO_TWIN:
                inv.write("".join(out))
                inv.say(f"--write-out %{{{name}}}: {UNMODELLED_CONTENT}")
                return inv.done(126)
            elif name in _KNOWN_VARIABLES:
                out.append(values[name])
            else:
                inv.err += f"curl: unknown --write-out variable: '{name}'\n".encode()
            i = fmt.index("}", i) + 1
        elif fmt.startswith("%%", i):
            out.append("%")
            i += 2
        elif fmt[i] == "\\" and i + 1 < len(fmt) and fmt[i + 1] in "nrt\\":
            out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[fmt[i + 1]])
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    inv.write("".join(out))
    return None
