"""The twin's loopback servers keep connections alive as a real API server does, and end them cleanly."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.backends.sim.server import ServerHandle, _listed_receive_queue, _receive_queue, serve


def _app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/stream":  # no length: sent chunked, like a watch
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"one\n", b"two\n"])
    if path == "/echo":
        body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/fail":
        raise RuntimeError("the app broke")
    text = f"{environ['REQUEST_METHOD']} {path}".encode()  # never reads a request body
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(text)))])
    return [text]


@pytest.fixture
def server() -> Iterator[ServerHandle]:
    handle = serve(_app)
    yield handle
    handle.stop()


@pytest.fixture
def conn(server: ServerHandle) -> Iterator[http.client.HTTPConnection]:
    """A client connection to ``server``, closed after the test."""
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    yield client
    client.close()


def _same_socket(conn: http.client.HTTPConnection, before: socket.socket | None) -> bool:
    return before is not None and conn.sock is before


def test_a_client_sends_its_next_request_on_the_same_connection(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/a")
    first = conn.getresponse()
    assert first.read() == b"GET /a" and first.getheader("Connection") is None
    sock = conn.sock
    conn.request("GET", "/b")
    assert conn.getresponse().read() == b"GET /b"
    assert _same_socket(conn, sock)


def test_a_body_the_app_did_not_read_is_drained_before_the_next_request(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/ignored", body=b"x" * 100_000)
    assert conn.getresponse().read() == b"POST /ignored"
    conn.request("POST", "/echo", body=b"payload")
    assert conn.getresponse().read() == b"payload"


def test_a_head_answer_sends_no_body_even_when_the_app_gives_one(conn: http.client.HTTPConnection) -> None:
    conn.request("HEAD", "/a")
    head = conn.getresponse()
    assert head.status == 200 and head.read() == b""
    conn.request("GET", "/b")  # the connection is still in step
    assert conn.getresponse().read() == b"GET /b"


def test_a_streamed_response_is_chunked_and_ends_its_connection(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/stream")
    response = conn.getresponse()
    assert response.getheader("Transfer-Encoding") == "chunked" and response.getheader("Connection") == "close"
    assert response.read() == b"one\ntwo\n"


def test_connection_close_from_the_client_is_honoured(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/a", headers={"Connection": "close"})
    response = conn.getresponse()
    assert response.getheader("Connection") == "close" and response.read() == b"GET /a"


def test_an_app_error_is_a_500_and_the_server_goes_on(server: ServerHandle, conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/fail")
    response = conn.getresponse()
    assert response.status == 500
    response.read()
    again = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    again.request("GET", "/a")
    assert again.getresponse().read() == b"GET /a"
    again.close()


def test_stop_ends_the_connections_it_kept_alive() -> None:
    handle = serve(_app)
    sock = socket.create_connection(("127.0.0.1", handle.port), timeout=10)
    sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    reply = b""
    while b"GET /a" not in reply:
        reply += sock.recv(4096)
    handle.stop()
    assert sock.recv(4096) == b""  # the server closed its end
    sock.close()


def test_a_client_that_expects_100_continue_gets_it_once_before_sending_its_body(server: ServerHandle) -> None:
    """http.server answers the interim response while parsing the request (curl waits for it up to a second)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body is sent
        sock.sendall(b"body")
        answer = b""
        while not answer.endswith(b"body"):
            answer += sock.recv(1024)
        assert answer.startswith(b"HTTP/1.1 200 ")  # no second interim response


@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="Linux only: the test checks the kernel's socket diagnostics against its /proc/net/tcp table, "
                           "which this machine does not have")
def test_a_client_s_unread_bytes_are_those_the_kernel_lists_for_its_socket() -> None:
    """A stream waits for its client to read what it was sent: the socket diagnostics the server asks
    must agree with the kernel's own table, and a socket gone since counts as having read all."""
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as client:
        server_side, _ = listener.accept()
        with server_side:
            server_side.sendall(b"x" * 1234)
            here, there = client.getsockname(), client.getpeername()
            for _ in range(100):  # loopback delivers at once; a loaded machine may take a moment
                if _listed_receive_queue(here, there):
                    break
                threading.Event().wait(0.01)
            assert _receive_queue(here, there) == _listed_receive_queue(here, there) == 1234
            client.recv(1000)
            assert _receive_queue(here, there) == _listed_receive_queue(here, there) == 234
    assert _receive_queue(here, there) == 0
