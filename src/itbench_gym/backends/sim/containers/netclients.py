"""The network clients an image may hold, answering from the pod's network (:mod:`.network`):
``nslookup`` and ``getent hosts`` (the cluster DNS), ``nc`` and ``wget`` (a TCP connection).

An HTTP request to one of the app's services is answered by the app model (its status and how long
it takes, ``traces/exchange.py``): an error status, a timeout and ``wget --spider`` end as busybox's
wget ends them. What the twin does not model — a protocol exchange other than such a request, a
route no operation serves, a response's headers and body — a client that gets that far says, and
exits 126. Every failure before it (a name that does not resolve, DNS that cannot be reached, a
refused or timed-out connection, a reset) is answered as the program would (busybox 1.36 wording,
whose applets these images carry).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .context import Dial, ExecResult, Lookup

if TYPE_CHECKING:
    from .programs import Invocation

#: What the twin says when a client needs the far end's answer.
UNMODELLED_EXCHANGE = "the itbench_gym twin does not model what the server answers once connected"
#: What it says when it knows the HTTP status a server answers with, but the client needs more.
UNMODELLED_CONTENT = "the itbench_gym twin models the status an app's server answers with, not its headers or body"
#: What it says for a destination its network model does not cover.
UNMODELLED_NETWORK = ("the itbench_gym twin does not model this destination (it models the cluster DNS and connections to "
                      "the Services of the app's namespace)")
_FAILURES = {"refused": "Connection refused", "timeout": "Connection timed out"}


def _network_or_refuse(inv: Invocation) -> bool:
    if inv.container.network is not None:
        return True
    inv.say("the itbench_gym twin does not model this pod's network")
    return False


def _resolve(inv: Invocation, host: str, shown: str) -> Lookup | None:
    """``host`` resolved for a client, or None after the client's diagnostic."""
    assert inv.container.network is not None
    found = inv.container.network.lookup(host)
    if found.error is None:
        return found
    if found.error == "unmodelled":
        inv.say(f"{shown}: {UNMODELLED_NETWORK}")
    else:
        inv.say(f"bad address '{shown}'")
    return None


def _connect(inv: Invocation, shown: str, ip: str, port: int, timed_out: str | None) -> Dial | None:
    """A client's TCP connection to ``ip:port``, or None after its diagnostic (``timed_out``: what it
    says when its own timeout, an option, expires first)."""
    assert inv.container.network is not None
    dial = inv.container.network.dial(ip, port)
    if dial.outcome == "unmodelled":
        inv.say(f"{shown} ({ip}:{port}): {UNMODELLED_NETWORK}")
        return None
    if dial.outcome in _FAILURES:
        if dial.outcome == "timeout" and timed_out is not None:
            inv.say(timed_out)
        else:
            inv.say(f"can't connect to remote host ({ip}): {_FAILURES[dial.outcome]}")
        return None
    return dial


def _nslookup(inv: Invocation) -> ExecResult:
    """nslookup NAME [SERVER]: the cluster DNS' answer (busybox's layout)."""
    from .programs import Usage, getopt, usage_error

    try:
        _, operands = getopt(inv, "", "")
    except Usage as bad:
        return usage_error(inv, str(bad), "", "", 1)
    if not operands or len(operands) > 2:
        inv.say("usage: nslookup [HOST] [SERVER]")
        return inv.done(1)
    if not _network_or_refuse(inv):
        return inv.done(1)
    assert inv.container.network is not None
    server = operands[1] if len(operands) == 2 else inv.container.network.nameserver
    if not server or server != inv.container.network.nameserver:
        inv.say(f"{server or 'the node resolver'}: {UNMODELLED_NETWORK}")
        return inv.done(1)
    found = inv.container.network.lookup(operands[0])
    if found.error == "timeout":
        inv.write(";; connection timed out; no servers could be reached\n\n")
        return inv.done(1)
    if found.error == "unmodelled":
        inv.say(f"{operands[0]}: {UNMODELLED_NETWORK}")
        return inv.done(1)
    inv.write(f"Server:\t\t{server}\nAddress:\t{server}:53\n\n")
    if found.error == "nxdomain":
        inv.write(f"** server can't find {operands[0]}: NXDOMAIN\n\n")
        return inv.done(1)
    inv.write("".join(f"Name:\t{found.name}\nAddress: {ip}\n" for ip in found.addresses) + "\n")
    return inv.done(0)


def _getent(inv: Invocation) -> ExecResult:
    """getent hosts NAME...: each name's address and canonical name; exit 2 when one is not found."""
    args = inv.argv[1:]
    if not args or args[0] not in ("hosts", "ahosts", "ahostsv4"):
        inv.say(f"{args[0] if args else 'the database'}: the itbench_gym twin answers only the hosts database"
                if args else "wrong number of arguments")
        return inv.done(1)
    if len(args) == 1:
        inv.say("enumerating the hosts database: the itbench_gym twin does not model the image's /etc/nsswitch.conf sources")
        return inv.done(1)
    if not _network_or_refuse(inv):
        return inv.done(1)
    assert inv.container.network is not None
    code = 0
    for name in args[1:]:
        found = inv.container.network.lookup(name)
        if found.error == "unmodelled":
            inv.say(f"{name}: {UNMODELLED_NETWORK}")
            code = 1
        elif found.error is not None:
            code = code or 2
        else:
            inv.write("".join(f"{ip:<15} {found.name}\n" for ip in found.addresses))
    return inv.done(code)


def _nc(inv: Invocation) -> ExecResult:
    """nc [-z] [-v] [-w SEC] HOST PORT: open a TCP connection (busybox's netcat)."""
    from .programs import Usage, getopt, usage_error

    try:
        opts, operands = getopt(inv, "zvn", "w")
    except Usage as bad:
        return usage_error(inv, str(bad), "zvn", "w", 1)
    flags = {letter for letter, _ in opts}
    if len(operands) != 2 or not operands[1].isdigit():
        inv.say("usage: nc [-z] [-v] [-w SEC] HOST PORT" if len(operands) != 2 else f"bad port '{operands[1]}'")
        return inv.done(1)
    if not _network_or_refuse(inv):
        return inv.done(1)
    host, port = operands[0], int(operands[1])
    found = _resolve(inv, host, host)
    if found is None:
        return inv.done(1)
    ip = found.addresses[0]
    dial = _connect(inv, host, ip, port, "timeout" if "w" in flags else None)
    if dial is None:
        return inv.done(1)
    if "v" in flags:
        inv.err += f"{host} ({ip}:{port}) open\n".encode()
    if "z" in flags:
        return inv.done(0)
    inv.err += f"itbench_gym: nc connected to {host} ({ip}:{port}); {UNMODELLED_EXCHANGE}\n".encode()
    return inv.done(126)


#: busybox wget's options: short letters, those taking a value, its long names (each long-only one
#: stands for a control character no short option uses, as busybox's getopt32 table does with
#: bytes 0xf0-0xff) and the ones it accepts and ignores.
_WGET_FLAGS = "cqS\x03\x04\x06"
_WGET_VALUED = "OPYUTt\x01\x02\x05"
_WGET_LONGS = {"continue": "c", "quiet": "q", "server-response": "S", "output-document": "O", "directory-prefix": "P",
               "proxy": "Y", "user-agent": "U", "timeout": "T", "tries": "t", "header": "\x01", "post-data": "\x02",
               "spider": "\x03", "no-check-certificate": "\x04", "post-file": "\x05", "passive-ftp": "\x06",
               "no-cache": "\x06", "no-verbose": "\x06", "no-clobber": "\x06", "no-host-directories": "\x06",
               "no-parent": "\x06"}
#: busybox wget's network timeout without ``-T``.
WGET_TIMEOUT_SECONDS = 900
_WGET_USAGE = ("usage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] [--header STR] [--post-data STR | --post-file FILE] "
               "[-Y on/off] [--no-check-certificate] [-P DIR] [-U AGENT] [-T SEC] URL...")


def _phrase(status: int) -> str:
    """The reason phrase servers send with ``status`` (none for a code HTTP does not name)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _wget(inv: Invocation) -> ExecResult:
    """wget [options] URL...: busybox's wget up to the HTTP exchange."""
    from .programs import Usage, getopt, read_operand, usage_error

    try:
        opts, operands = getopt(inv, _WGET_FLAGS, _WGET_VALUED, _WGET_LONGS, optional="n")
    except Usage as bad:
        return usage_error(inv, str(bad), _WGET_FLAGS, _WGET_VALUED + "n", 1, _WGET_LONGS)
    given = [letter for letter, _ in opts]
    if not operands or given.count("\x02") + given.count("\x05") > 1:
        inv.say(_WGET_USAGE)
        return inv.done(1)
    timeout = next((value for letter, value in opts if letter == "T"), None)
    if timeout is not None and not timeout.isdigit():
        inv.say(f"invalid number '{timeout}'")
        return inv.done(1)
    if not _network_or_refuse(inv):
        return inv.done(1)
    quiet = "q" in given
    post_file = next((value for letter, value in opts if letter == "\x05"), None)
    # busybox fetches the URLs in order and dies on the first that fails; the twin's exchange ends at
    # the first connection either way
    operand = operands[0]
    url = operand if "://" in operand else f"http://{operand}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        inv.say(f"bad port spec '{operand}'")
        return inv.done(1)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        inv.say(f"not an http or ftp url: {operand}")
        return inv.done(1)
    port = port or (443 if parts.scheme == "https" else 80)
    shown = parts.netloc.rsplit("@", 1)[-1]
    found = _resolve(inv, parts.hostname, shown)
    if found is None:
        return inv.done(1)
    ip = found.addresses[0]
    if not quiet:
        inv.err += f"Connecting to {shown} ({ip}:{port})\n".encode()
    dial = _connect(inv, shown, ip, port, "download timed out" if timeout is not None else None)
    if dial is None:
        return inv.done(1)
    if dial.outcome == "reset":
        inv.say("error getting response: Connection reset by peer")
        return inv.done(1)
    posted = read_operand(inv, post_file, "wget") if post_file is not None else None
    if post_file is not None and posted is None:
        return inv.done(1)  # busybox reads the body it posts once connected
    post_data = next((value for letter, value in opts if letter == "\x02"), None)
    method = "POST" if post_data is not None or posted is not None else "GET"
    body = posted if posted is not None else (post_data or "").encode("utf-8", "surrogateescape")
    assert inv.container.network is not None
    answer = inv.container.network.request(ip, port, method, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body)
    if answer is None:
        inv.err += f"itbench_gym: wget connected to {shown} ({ip}:{port}); {UNMODELLED_EXCHANGE}\n".encode()
        return inv.done(126)
    if answer.seconds > (int(timeout) if timeout is not None else WGET_TIMEOUT_SECONDS):
        inv.say("download timed out")
        return inv.done(1)
    if answer.status is None:
        inv.say("error getting response: Connection reset by peer")
        return inv.done(1)
    status = f"HTTP/1.1 {answer.status} {_phrase(answer.status)}".rstrip()
    if "S" in given:
        inv.err += f"  {status}\n".encode()
    if not 200 <= answer.status <= 204:
        inv.say(f"server returned error: {status}")
        return inv.done(1)
    if "\x03" in given and "S" not in given:  # --spider: the status is the whole answer
        if not quiet:
            inv.err += b"remote file exists\n"
        return inv.done(0)
    to_stdout = next((value for letter, value in reversed(opts) if letter == "O"), None) == "-"
    if answer.body is not None and to_stdout:
        if not quiet:
            inv.err += b"writing to stdout\nitbench_gym: wget's progress meter is not shown by the twin\n"
        inv.write(answer.body)
        if not quiet:
            inv.err += b"written to stdout\n"
        return inv.done(0)
    inv.err += f"itbench_gym: wget got {status} from {shown} ({ip}:{port}); {UNMODELLED_CONTENT}\n".encode()
    return inv.done(126)


#: The network clients, by program name.
PROGRAMS = {"nslookup": _nslookup, "getent": _getent, "nc": _nc, "wget": _wget}
