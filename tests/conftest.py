"""Shared fixtures. ``hermes`` is the real hermes-agent in its own virtualenv (never skipped)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.hermes_env import Hermes

HERMES_VERSION = os.environ.get("HERMES_VERSION", "0.19.0")


@pytest.fixture(scope="session")
def hermes() -> Hermes:
    return Hermes(HERMES_VERSION)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``: proves a command changed no byte.

    A WAL database opened read-only gets SQLite's ``-shm`` index and an empty ``-wal``
    created beside it; neither holds data, so ``-shm`` and empty ``-wal`` files are left out.
    """
    out = {}
    for p in sorted(root.rglob("*")):
        if p.name.endswith("-shm") or (p.name.endswith("-wal") and p.stat().st_size == 0):
            continue
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
