"""Lease and lock holders in Hermes's format (``pid=<n>:pidns=<id>:<tag>``), alive or provably dead."""

from __future__ import annotations

import os
import subprocess


def pidns() -> str:
    return os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")


def live_holder(tag: str) -> str:
    """A holder whose process (this test) is alive."""
    return f"pid={os.getpid()}:pidns={pidns()}:{tag}"


def dead_holder(tag: str) -> str:
    """A holder in our PID namespace whose process has exited: provably dead."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"pid={proc.pid}:pidns={pidns()}:{tag}"
