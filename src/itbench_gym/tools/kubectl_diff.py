"""What ``kubectl diff`` needs around the real binary: the diff program it runs, and its output as a
cluster's clock and a machine's ``/tmp`` would show it.

kubectl writes the live objects and the objects as they would be after the apply (a server-side dry
run) into two temporary folders, ``LIVE-<n>`` and ``MERGED-<n>`` under ``$TMPDIR``, and runs
``$KUBECTL_EXTERNAL_DIFF`` on them (default ``diff -u -N``; its exit status 1 means "differences").
The tool runs GNU diff from this machine's ``/usr`` (kubectl's default program and options) inside
the same sandbox. Two things in diff's headers would come from this machine rather than the episode:
the folders' random suffixes and paths (the episode's workspace) and the files' modification times
(written by the kernel's clock, which the clock shim does not reach). They are shown as they would be
on an agent's machine at the twin's time: ``/tmp/LIVE-<n>`` with ``<n>`` drawn from the twin's clock,
and that clock's time as both files' times, so the same actions give the same observation.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
from datetime import UTC, datetime

#: kubectl's default diff options.
DIFF_OPTIONS = ("-u", "-N")
_TIMESTAMP = re.compile(r"\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [+-]\d{4}$")


@functools.cache
def diff_program() -> str | None:
    """GNU diff on this machine (Debian's diffutils is essential), or None."""
    return shutil.which("diff", path="/usr/bin:/bin")


def external_diff() -> str | None:
    """``KUBECTL_EXTERNAL_DIFF`` for the sandbox: the program by its absolute path and kubectl's default options."""
    program = diff_program()
    return " ".join((program, *DIFF_OPTIONS)) if program is not None else None


def as_on_a_cluster(output: str, workspace: str, now: float) -> str:
    """diff's output with the workspace's ``LIVE-``/``MERGED-`` folders shown under ``/tmp`` with
    suffixes drawn from ``now``, and ``now`` as the compared files' modification time."""
    folders = re.compile(re.escape(workspace.rstrip("/")) + r"/(LIVE|MERGED)-\d+")
    output = folders.sub(lambda m: f"/tmp/{m.group(1)}-{_suffix(m.group(1), now)}", output)
    stamp = "\t" + _diff_time(now)
    lines = output.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("diff ") and i + 2 < len(lines):
            for header in (i + 1, i + 2):
                if lines[header].startswith(("--- /tmp/", "+++ /tmp/")):
                    lines[header] = _TIMESTAMP.sub(stamp, lines[header])
    return "\n".join(lines)


def _suffix(kind: str, now: float) -> int:
    """The folder's suffix (Go's ``os.MkdirTemp``: a random 32-bit number), from the clock."""
    return int.from_bytes(hashlib.sha256(f"{kind}@{now:.9f}".encode()).digest()[:4], "big")


def _diff_time(now: float) -> str:
    """A modification time as GNU diff's unified headers print it in UTC (``%Y-%m-%d %H:%M:%S.%N %z``)."""
    whole = int(now)
    nanos = min(int((now - whole) * 1e9), 999_999_999)
    return datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%d %H:%M:%S") + f".{nanos:09d} +0000"
