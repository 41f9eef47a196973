"""What a container's process was started with, read from its pod spec the way the node would.

The kubelet resolves env (ConfigMap and Secret keys included) when it creates the container, the
runtime expands ``$(VAR)`` in ``command``/``args`` from that env, and a shell started as ``sh -c
<script>`` runs the text of the file it names (a ConfigMap volume's key, when one is mounted there).
From those the model reads what the app's behaviour depends on: the password a server requires
(app.yaml ``auth``), and how fast a shell loop that stores data through the server's own client
(app.yaml ``store``) fills its memory.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cluster_view import ClusterView, PodView, container_env, expand_vars
from .spec import Listener, Service

_SHELLS = {"sh", "bash", "ash", "dash"}
_LOOP = re.compile(r"while\s+(?:true|:)\s*;?\s*do\b(?P<body>.*?)\bdone\b", re.S)
_SLEEP = re.compile(r"(?<![\w-])sleep\s+(?P<s>\d+(?:\.\d+)?)")
#: busybox head's ``-c`` suffixes (the Alpine-based images' head).
_HEAD_SUFFIX = {"": 1, "b": 512, "k": 1024, "m": 1024 * 1024}


def started_env(pod: PodView, view: ClusterView) -> dict[str, str]:
    """The app container's env as the kubelet builds it now (what a run starting now gets)."""
    return container_env(pod.container, pod.pod, view.key, view.data)


def argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded from ``env`` (undefined ones stay, ``$$`` is ``$``)."""
    return [expand_vars(str(x), env) for x in [*(container.get("command") or []), *(container.get("args") or [])]]


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in an argument vector (``--flag value``, ``--flag=value``, and for a
    one-letter ``-f`` also ``-fvalue`` as Go's pflag reads it); None when absent."""
    short = len(flag) == 2 and flag[0] == "-" and flag[1] != "-"
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
        if short and arg.startswith(flag) and len(arg) > 2:
            return arg[2:]
    return None


def listening_port(listener: Listener, args: list[str], env: Mapping[str, str]) -> int | None:
    """The port a process started with ``args`` and ``env`` listens on (None: a value it cannot use,
    so it serves nothing there)."""
    raw = next((v for v in (flag_value(args, f) for f in listener.flags) if v is not None), None)
    if raw is None and listener.env is not None:
        raw = env.get(listener.env)
    if raw is None:
        return listener.default
    return int(raw) if raw.strip().isdigit() and 0 < int(raw) < 65536 else None


def container_ports(svc: Service, container: Mapping[str, Any], env: Mapping[str, str]) -> set[int] | None:
    """The ports the process of ``container`` listens on when it is the service's own or one of its
    sidecars (each read from the command line and env it started with); None for any other container."""
    name = container.get("name")
    if name == svc.container:
        listeners = svc.listeners
    elif name in svc.sidecars:
        listeners = svc.sidecars[str(name)].ports
    else:
        return None
    args = argv(container, env)
    return {port for listener in listeners if (port := listening_port(listener, args, env)) is not None}


def mounted_file(path: str, container: Mapping[str, Any], pod: Mapping[str, Any], view: ClusterView) -> str | None:
    """The text of ``path`` when a ConfigMap volume provides it, else None."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        root = str(mount.get("mountPath", "")).rstrip("/")
        if not path.startswith(root + "/"):
            continue
        source = (volumes.get(mount.get("name")) or {}).get("configMap")
        if not source:
            continue
        rel = path[len(root) + 1:]
        items = source.get("items")
        key = next((i.get("key") for i in items if i.get("path") == rel), None) if items else rel
        if key is not None:
            return view.key("ConfigMap", str(source.get("name", "")), str(key))
    return None


def shell_script(container: Mapping[str, Any], pod: Mapping[str, Any], env: Mapping[str, str], view: ClusterView) -> str | None:
    """The program a ``sh -c`` container runs: the command string, or the mounted script it names."""
    args = argv(container, env)
    if len(args) < 3 or posixpath.basename(args[0]) not in _SHELLS or args[1] != "-c":
        return None
    text = args[2]
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    if len(words) == 1 and words[0].startswith("/"):
        return mounted_file(words[0], container, pod, view) or text
    return text


@dataclass(frozen=True)
class StoreWrites:
    """A shell loop storing data through a server's client: from ``delay_s`` after the start, ``bytes_per_s``."""

    delay_s: float
    bytes_per_s: float


def store_writes(script: str, client: str, commands: tuple[str, ...]) -> StoreWrites | None:
    """The endless ``while true`` loop of ``script`` that pipes ``head -c <size>`` into ``client`` running
    one of ``commands``, with the sleeps before the loop (delay) and in it (period); None without one."""
    write = re.compile(r"head\s+-c\s+(?P<n>\d+)(?P<unit>[bkm]?)\s+\S+\s*\|\s*" + re.escape(client)
                       + r"\b[^|\n;]*?\b(?:" + "|".join(re.escape(c) for c in commands) + r")\b", re.I)
    for loop in _LOOP.finditer(script):
        body = loop.group("body")
        m = write.search(body)
        if m is None:
            continue
        size = int(m.group("n")) * _HEAD_SUFFIX[m.group("unit").lower()]
        period = sum(float(s.group("s")) for s in _SLEEP.finditer(body))
        delay = sum(float(s.group("s")) for s in _SLEEP.finditer(script[: loop.start()]))
        return StoreWrites(delay, size / max(period, 0.05))
    return None
