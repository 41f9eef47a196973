"""``kubectl exec``'s stream protocol: a WebSocket carrying the ``v5.channel.k8s.io`` channels.

kubectl (1.30 and later, client-go's ``remotecommand`` websocket executor) asks for the exec with a
``GET`` upgraded to a WebSocket whose subprotocol is ``v5.channel.k8s.io``; it falls back to SPDY only
when that upgrade is refused. Every binary message starts with its channel: 0 stdin (client to
server), 1 stdout, 2 stderr, 3 the error channel (a ``Status`` when the process ends), 4 terminal
resizes, and in v5 255 with a channel number to close that channel (how the client ends stdin).
The WebSocket framing is wsproto's; this module does the handshake answer and the channels.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from werkzeug.datastructures import Headers
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage

PROTOCOL = "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
#: RFC 6455's key suffix for ``Sec-WebSocket-Accept``.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: Most stdin bytes an exec reads; the twin's programs read their input whole.
MAX_STDIN = 1 << 20
#: Bytes of stdout or stderr per message (kubectl copies each message as it comes).
_CHUNK = 32 << 10


@dataclass(frozen=True)
class Outcome:
    """What the exec'd process wrote and how it ended: ``status`` is the error channel's Status."""

    stdout: bytes
    stderr: bytes
    status: Mapping[str, Any]


def success() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def exit_status(argv: list[str], code: int) -> dict[str, Any]:
    """The kubelet's Status for a process that exited non-zero (kubectl exits with the same code)."""
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command [{' '.join(argv)}], exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def internal_error(message: str) -> dict[str, Any]:
    """A Status for an exec the runtime could not start (kubectl prints ``error: <message>``)."""
    text = f"Internal error occurred: {message}"
    return {"metadata": {}, "status": "Failure", "message": text, "reason": "InternalError",
            "details": {"causes": [{"message": message}]}, "code": 500}


def requested(headers: Headers) -> bool:
    """Whether the request asks for a WebSocket."""
    return headers.get("Upgrade", "").lower() == "websocket" and "upgrade" in headers.get("Connection", "").lower()


def offers_protocol(headers: Headers) -> bool:
    offered = {p.strip() for p in headers.get("Sec-WebSocket-Protocol", "").split(",")}
    return PROTOCOL in offered and headers.get("Sec-WebSocket-Version", "") == "13" and bool(headers.get("Sec-WebSocket-Key"))


def handshake_headers(headers: Headers) -> list[tuple[str, str]]:
    """The ``101 Switching Protocols`` answer's headers (the request must :func:`offers_protocol`)."""
    key = headers.get("Sec-WebSocket-Key", "").strip().encode()
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()  # RFC 6455 mandates SHA-1
    return [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", accept),
            ("Sec-WebSocket-Protocol", PROTOCOL)]


class Session:
    """One exec or attach over an upgraded connection: read stdin when asked for (or, for an attach,
    watch for the client leaving), run, send the output, the Status, then close the WebSocket."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self._reader, self._writer = reader, writer
        self._ws = Connection(ConnectionType.SERVER)
        self._lock = threading.Lock()  # the connection's state and the writer, shared with ``follow``'s reader

    def serve(self, run: Callable[[bytes], Outcome], *, stdin: bool) -> None:
        data = self._read_stdin() if stdin else b""
        if data is None:
            return  # the client went away
        self._finish(run(data))

    def follow(self, run: Callable[[Callable[[], bool]], Outcome]) -> None:
        """An attach: ``run`` is told whether the client has left (its frames, stdin included, are read
        meanwhile and dropped: the twin's process took no input), then its outcome is sent."""
        left = threading.Event()
        threading.Thread(target=self._drain, args=(left,), daemon=True, name="attach-reader").start()
        outcome = run(left.is_set)
        if not left.is_set():
            self._finish(outcome)

    def _finish(self, outcome: Outcome) -> None:
        for channel, payload in ((STDOUT, outcome.stdout), (STDERR, outcome.stderr)):
            for i in range(0, len(payload), _CHUNK):
                self._send(bytes([channel]) + payload[i:i + _CHUNK])
        self._send(bytes([ERROR]) + json.dumps(outcome.status, separators=(",", ":")).encode())
        self._close()

    def _send(self, payload: bytes) -> None:
        with self._lock:
            self._writer.write(self._ws.send(BytesMessage(data=payload)))
            self._writer.flush()

    def _close(self) -> None:
        with self._lock:
            if self._ws.state is ConnectionState.OPEN:
                self._writer.write(self._ws.send(CloseConnection(code=1000)))
                self._writer.flush()

    def _drain(self, left: threading.Event) -> None:
        """Read the client's frames until it closes the WebSocket or the connection ends; then ``left``."""
        try:
            while True:
                chunk = self._reader.read1(65536) if hasattr(self._reader, "read1") else self._reader.read(65536)
                if not chunk:
                    break
                with self._lock:
                    self._ws.receive_data(chunk)
                    events = list(self._ws.events())
                    for event in events:
                        if isinstance(event, Ping):
                            self._writer.write(self._ws.send(event.response()))
                            self._writer.flush()
                if any(isinstance(event, CloseConnection) for event in events):
                    break
        except (OSError, ValueError):
            return  # the connection ended under the read (``finally`` says the client left)
        finally:
            left.set()

    def _read_stdin(self) -> bytes | None:
        """stdin until the client closes the channel; None when the connection ends first."""
        out = bytearray()
        message = bytearray()
        while True:
            for event in self._ws.events():
                if isinstance(event, Ping):
                    self._writer.write(self._ws.send(event.response()))
                    self._writer.flush()
                elif isinstance(event, CloseConnection):
                    return None
                elif isinstance(event, Message):
                    message += event.data.encode() if isinstance(event, TextMessage) else event.data
                    if not event.message_finished:
                        continue
                    frame, message = bytes(message), bytearray()
                    if frame[:1] == bytes([STDIN]):
                        out += frame[1:]
                        if len(out) > MAX_STDIN:
                            return bytes(out[:MAX_STDIN])
                    elif frame[:2] == bytes([CLOSE, STDIN]):
                        return bytes(out)
            chunk = self._reader.read1(65536) if hasattr(self._reader, "read1") else self._reader.read(65536)
            if not chunk:
                return None
            self._ws.receive_data(chunk)
