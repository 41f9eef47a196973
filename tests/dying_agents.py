"""Agents for the runner's tests that end their worker process the way a crash or the OOM killer would."""

from __future__ import annotations

import os
import signal
from typing import Any


def killed(env: Any) -> None:
    """Builds no agent: the process is SIGKILLed first (what the kernel's OOM killer does)."""
    os.kill(os.getpid(), signal.SIGKILL)
