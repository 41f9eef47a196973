"""Loopback HTTP(S) servers for the twin's WSGI apps.

One threaded werkzeug server per app on 127.0.0.1 and an ephemeral port, speaking HTTP/1.1 so
watch responses stream with chunked encoding. ``stop()`` closes the listening socket and every open
connection and joins the serving thread, so an env's ``close()`` leaves nothing behind.

Connections are kept alive, as a real API server and Prometheus keep them: werkzeug's own handler
closes each one after a response, so every request of a client paid a new TCP connection and, for the
API server, a TLS handshake on both ends (a sixth of a mitigation watch's time went to them). A
response with a known length keeps its connection once the request's body is read to its end; a
streamed response (a watch), a chunked request body, HTTP/1.0 and ``Connection: close`` end it.
"""

from __future__ import annotations

import errno
import functools
import io
import logging
import os
import select
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, cast

from werkzeug.exceptions import InternalServerError
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from itbench_gym.backends.programs import Traffic, in_flight, unsent, wait_readable

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
log = logging.getLogger(__name__)
#: Seconds an idle kept-alive connection waits for its next request before the server closes it.
KEEP_ALIVE_SECONDS = 30.0
#: Most unread request-body bytes read past after a response (a 413 for a body too large to read): a
#: client sees the answer instead of a reset, and the connection stays usable; more and it is closed.
DRAIN_AT_MOST = 16 << 20
#: Responses that carry no body whatever their headers say (RFC 9110 §6.4.1).
_BODILESS = frozenset({204, 304})
#: WSGI environ key an app sets, with a ``101 Switching Protocols`` answer, to the function that takes
#: the connection over (its reader and writer) once the answer is sent; the connection ends with it.
UPGRADE = "itbench_gym.upgrade"
#: WSGI environ key of a function that says whether the client has left: its end of the connection is
#: closed, or it sent something while waiting for a streamed answer (an HTTP/1.1 client sends nothing
#: then; only a close or TLS's closing alert can arrive).
PEER_GONE = "itbench_gym.peer_gone"
#: WSGI environ key of a function that says whether the client has not yet taken in all the server sent
#: (bytes still in this end's send queue or in the client's receive queue, ``/proc/net/tcp``): a client
#: whose threads all sleep may just not have been woken for them yet.
PEER_UNREAD = "itbench_gym.peer_unread"


class _Body:
    """A request body of ``Content-Length`` bytes that counts what the app read, so the rest can be
    drained before the connection's next request line."""

    def __init__(self, stream: IO[bytes], length: int) -> None:
        self._stream, self.left = stream, length

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self._stream.read(size) if size else b""
        self.left -= len(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self._stream.readline(size) if size else b""
        self.left -= len(data)
        return data

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def drain(self) -> bool:
        """Read what the app left; False if the client sent less than it announced."""
        while self.left:
            if not self.read(65_536):
                return False
        return True


class _Handler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = KEEP_ALIVE_SECONDS
    #: A kept-alive connection is not closed after the response, and the close is what pushed the
    #: last small segments out at once: without TCP_NODELAY, Nagle's algorithm holds them for the
    #: client's delayed ACK (40 ms a response).
    disable_nagle_algorithm = True

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Request logging would flood the agent's terminal; errors still go to logging."""

    def log_error(self, format: str, *args: Any) -> None:
        if format.startswith("Request timed out"):
            return  # an idle kept-alive connection reached KEEP_ALIVE_SECONDS: not an error
        super().log_error(format, *args)

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)  # type: ignore[attr-defined]

    def handle_one_request(self) -> None:
        """Wait for the next request's first byte as the client's turn, not the server's (``Traffic``).

        The connection stays counted as served while it looks, without blocking, for bytes already
        there (read ahead into the buffer with a drained body, decrypted by TLS, or in the socket's
        queue); only with none does it stop counting and wait on the socket, and it counts again
        before a byte leaves the queue, so no look at the servers falls between the two.
        """
        traffic: Traffic = self.server.traffic  # type: ignore[attr-defined]
        if not self._request_started():
            traffic.end()
            try:
                if not wait_readable(self.connection, self.timeout):
                    self.close_connection = True  # an idle kept-alive connection reached KEEP_ALIVE_SECONDS
                    return
            except (OSError, ValueError):
                self.close_connection = True  # closed meanwhile
                return
            finally:
                traffic.begin()
        super().handle_one_request()

    def _request_started(self) -> bool:
        """Whether a byte of the next request can be read without waiting."""
        timeout = self.connection.gettimeout()
        try:
            self.connection.settimeout(0)
            return bool(cast(io.BufferedReader, self.rfile).peek(1))
        except OSError:
            return False  # nothing yet (TLS says so with an error)
        finally:
            try:
                self.connection.settimeout(timeout)
            except OSError:
                pass

    def finish(self) -> None:
        self.server.connections.discard(self.connection)  # type: ignore[attr-defined]
        super().finish()

    def run_wsgi(self) -> None:
        """One request; the connection stays open for the next one when nothing forbids it."""
        environ = self.make_environ()
        environ[PEER_GONE] = self._peer_gone
        environ[PEER_UNREAD] = self._peer_unread
        body: _Body | None = None
        if "wsgi.input_terminated" not in environ:  # not chunked: CONTENT_LENGTH bytes, or none
            try:
                length = max(0, int(environ.get("CONTENT_LENGTH") or 0))
            except ValueError:
                length = 0
            body = _Body(environ["wsgi.input"], length)
            environ["wsgi.input"] = body
        keep = body is not None and self.request_version == "HTTP/1.1" and not self.close_connection
        response: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            if exc_info and "sent" in response:
                raise exc_info[1].with_traceback(exc_info[2])
            response["status"], response["headers"] = status, headers
            return write

        def write(data: bytes) -> None:
            if "sent" not in response:
                self._send_head(environ, response, keep)
            if data and not response["bodiless"]:  # a HEAD answer's body is never sent (it would end up in the next response)
                if response["chunked"]:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    self.wfile.write(data)
            self.wfile.flush()

        try:
            chunks = self.server.app(environ, start_response)
            try:
                for data in chunks:
                    write(data)
                if "sent" not in response:
                    write(b"")
                if response["chunked"]:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True
            return
        except Exception:
            log.exception("error on %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            self.close_connection = True
            if "sent" not in response:
                response.pop("status", None)
                try:
                    for data in InternalServerError()(environ, start_response):
                        write(data)
                except OSError:
                    pass
            return
        upgrade = environ.get(UPGRADE)
        if response.get("code") == 101 and callable(upgrade):
            self.close_connection = True
            try:
                upgrade(self.rfile, self.wfile)
            except (ConnectionError, TimeoutError, ssl.SSLError, ValueError):
                pass  # the client went away mid-stream (ValueError: a write to a closed file)
            except Exception:
                log.exception("error in the upgraded connection of %s", environ.get("PATH_INFO"))
            return
        if body is not None and not self.close_connection and (body.left > DRAIN_AT_MOST or not body.drain()):
            self.close_connection = True

    def _peer_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def _peer_unread(self) -> bool:
        try:
            if unsent(self.connection):
                return True
            mine, theirs = self.connection.getsockname(), self.connection.getpeername()
        except (OSError, ValueError):
            return False  # closed: nothing will be read
        return _receive_queue(theirs, mine) > 0

    def _send_head(self, environ: dict[str, Any], response: dict[str, Any], keep: bool) -> None:
        status = response["status"]
        code_text, _, reason = status.partition(" ")
        code = response["code"] = int(code_text)
        names = {name.lower() for name, _ in response["headers"]}
        self.send_response(code, reason)
        if code == 101:  # the upgrade's own Connection and Upgrade headers go as they are
            for name, value in response["headers"]:
                self.send_header(name, value)
            self.end_headers()
            response["sent"], response["bodiless"], response["chunked"] = True, True, False
            return
        for name, value in response["headers"]:
            if name.lower() != "connection":
                self.send_header(name, value)
        response["bodiless"] = environ["REQUEST_METHOD"] == "HEAD" or code < 200 or code in _BODILESS
        sized = "content-length" in names or response["bodiless"]
        response["chunked"] = not sized
        if not sized:
            self.send_header("Transfer-Encoding", "chunked")
        if keep and sized:
            self.close_connection = False
        else:
            self.send_header("Connection", "close")  # http.server then ends the connection after this request
        self.end_headers()
        response["sent"] = True


def _receive_queue(local: tuple[str, int], remote: tuple[str, int]) -> int:
    """Bytes waiting to be read on the IPv4 TCP socket ``local`` connected to ``remote``: asked of the
    kernel's socket diagnostics for that one socket (what ``ss`` reads; ~13 µs), else read from
    ``/proc/net/tcp`` (~3.4 ms here: the kernel formats every socket); 0 when neither lists it."""
    try:
        return _diagnosed_receive_queue(local, remote)
    except OSError:  # no netlink socket diagnostics here (not Linux, or refused to this process)
        return _listed_receive_queue(local, remote)


#: ``linux/sock_diag.h`` and ``linux/netlink.h``: the protocol, the request type, a lookup (no dump)
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR = 4, 20, 1, 2
#: ``struct inet_diag_sockid``'s ports and addresses (network order, IPv4 in the first word of four);
#: then its interface and its cookie (any socket: ``INET_DIAG_NOCOOKIE``)
_SOCKID = struct.Struct("!HH16s16s")
_SOCKID_TAIL = struct.Struct("=III")
#: ``struct nlmsghdr`` and ``struct inet_diag_req_v2``'s head (family, protocol, extensions, pad, states)
_NLMSGHDR = struct.Struct("=IHHII")
_REQ_HEAD = struct.Struct("=BBBBI")
#: ``struct inet_diag_msg``: after its four one-byte fields and the socket id, expires then rqueue
_RQUEUE_AT = _NLMSGHDR.size + 4 + _SOCKID.size + _SOCKID_TAIL.size + 4


def _diagnosed_receive_queue(local: tuple[str, int], remote: tuple[str, int]) -> int:
    sockid = (_SOCKID.pack(local[1], remote[1], socket.inet_aton(local[0]) + bytes(12), socket.inet_aton(remote[0]) + bytes(12))
              + _SOCKID_TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF))
    request = _REQ_HEAD.pack(socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as netlink:
        netlink.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + request)
        answer = netlink.recv(4096)
    _, kind, _, _, _ = _NLMSGHDR.unpack_from(answer)
    if kind == _NLMSG_ERROR:
        code = -int(struct.unpack_from("=i", answer, _NLMSGHDR.size)[0])
        if code == errno.ENOENT:  # no such socket: it closed meanwhile
            return 0
        raise OSError(code, os.strerror(code))
    return int(struct.unpack_from("=I", answer, _RQUEUE_AT)[0])


def _listed_receive_queue(local: tuple[str, int], remote: tuple[str, int]) -> int:
    def hexed(address: tuple[str, int]) -> str:
        return f"{socket.inet_aton(address[0])[::-1].hex().upper()}:{address[1]:04X}"

    try:
        table = Path("/proc/net/tcp").read_text()
    except OSError:
        return 0
    want = (hexed(local), hexed(remote))
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 4 and (fields[1], fields[2]) == want:
            return int(fields[4].split(":")[1], 16)
    return 0


def _pending(server: BaseWSGIServer) -> bool:
    """Whether ``server`` has a connection to accept, a connection with bytes to read (a request not
    yet taken in, or a client's close), or bytes it sent that the client's end has not received yet."""
    return in_flight([server.socket, *server.connections])  # type: ignore[attr-defined]


class ServerHandle:
    """A running server: ``url``, ``port``, ``stop()``; also a context manager."""

    def __init__(self, server: BaseWSGIServer, scheme: str, app: WSGIApp) -> None:
        self._server = server
        self._app = app
        self.port: int = server.socket.getsockname()[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"itbench-gym-server-{self.port}", daemon=True)
        self._thread.start()
        self._stopped = False

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        close = getattr(self._app, "close", None)
        if callable(close):
            close()  # ends open watches so their request threads finish
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self._server.connections):  # type: ignore[attr-defined]
            try:
                conn.shutdown(socket.SHUT_RDWR)  # a kept-alive connection's thread then sees its end
            except OSError:
                pass
        self._thread.join(timeout=10)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all(handles: Sequence[ServerHandle]) -> None:
    """Stop servers together: each waits up to a poll interval for its loop to notice, so one after
    another they would take a poll interval each."""
    threads = [threading.Thread(target=h.stop, name=f"itbench-gym-stop-{h.port}") for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def serve(app: WSGIApp, *, ssl_context: ssl.SSLContext | None = None, port: int = 0,
          traffic: Traffic | None = None) -> ServerHandle:
    """Serve ``app`` on 127.0.0.1 (``port`` 0: an ephemeral port) in a background thread; ``traffic``
    counts the connections being served, from their accept (a TLS handshake included) to their end,
    but for their waits for a next request."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=_Handler, ssl_context=ssl_context)
    server.daemon_threads = True  # type: ignore[attr-defined]
    server.connections = set()  # type: ignore[attr-defined]
    counted = server.traffic = traffic or Traffic()  # type: ignore[attr-defined]
    accept, shutdown_request = server.get_request, server.shutdown_request

    def get_request() -> tuple[socket.socket, Any]:
        counted.begin()
        try:
            return accept()
        except BaseException:
            counted.end()
            raise

    def shutdown_one(request: Any) -> None:
        try:
            shutdown_request(request)
        finally:
            counted.end()

    server.get_request = get_request  # type: ignore[method-assign]
    server.shutdown_request = shutdown_one  # type: ignore[method-assign]
    counted.pending.append(functools.partial(_pending, server))
    return ServerHandle(server, "https" if ssl_context is not None else "http", app)
