"""Shared fixtures. ``hermes`` is the real hermes-agent in its own virtualenv (never skipped)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.sqlite import walreset
from tests.hermes_env import Hermes

HERMES_VERSION = os.environ.get("HERMES_VERSION", "0.19.0")
# The keeper prints plain ASCII under a locale that is not UTF-8 (cli/text.ascii_only); the suite
# expects UTF-8 output unless a test sets LANG=C itself, whatever locale the CI machine starts with.
for _var in ("LC_ALL", "LC_CTYPE"):
    os.environ.pop(_var, None)
os.environ["LANG"] = "C.UTF-8"
ROOT = Path(__file__).resolve().parent.parent


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


@contextlib.contextmanager
def tiny_disk(path: Path, size: str):
    """A real small filesystem (tmpfs of ``size``) mounted at ``path``, unmounted at the end.

    One policy for what needs root: the test mounts for real and fails loudly where it cannot
    (CI runs as root); never a skip, never a monkeypatched ENOSPC under the same test's name."""
    path.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        for _ in range(50):  # a closing SQLite connection can keep it busy for a moment
            if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "--lazy", str(path)], check=True)


#: SQLite versions either side of the WAL-reset bug (hermes_keeper.sqlite.walreset).
FIXED_SQLITE, VULNERABLE_SQLITE = (3, 51, 3), (3, 40, 1)


@pytest.fixture
def fixed_sqlite(monkeypatch):
    """The keeper's SQLite taken for a fixed one (3.51.3): it checkpoints and cuts the WAL beside
    Hermes as on a current build, whatever this Python links."""
    monkeypatch.setattr(walreset, "LINKED", FIXED_SQLITE)


@pytest.fixture
def vulnerable_sqlite(monkeypatch):
    """The keeper's SQLite taken for one with the WAL-reset bug (3.40.1, Debian 12's)."""
    monkeypatch.setattr(walreset, "LINKED", VULNERABLE_SQLITE)


@pytest.fixture
def hold_open(hermes):
    """``hold_open(db_path)`` starts a process that keeps ``db_path`` open, as a running Hermes does.

    By default it opens it through Hermes's own ``SessionDB`` (which also switches it to WAL);
    ``via_hermes=False`` opens it with plain sqlite3 and leaves its journal mode alone. Killed
    at teardown.
    """
    procs = []

    def start(db_path: Path, via_hermes: bool = True) -> subprocess.Popen:
        opener = (
            "import hermes_state; hermes_state.SessionDB(Path(sys.argv[1])).session_count()"
            if via_hermes
            else "import sqlite3; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions')"
        )
        proc = subprocess.Popen(
            [
                str(hermes.python),
                "-c",
                "import sys, time; from pathlib import Path; "
                f"{opener}; print('ok', flush=True); time.sleep(120)",
                str(db_path),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HERMES_HOME": str(Path(db_path).parent)},
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ok"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def hermes_home(hermes, tmp_path_factory):
    """``hermes_home(dest, **generate_kwargs)``: a copy of a home built by real Hermes.

    The sessions come from ``demo.generate(now, **generate_kwargs)`` through the driver's
    ``build`` op; each distinct spec is built once per test run and copied (Hermes closed it
    cleanly, so there is no WAL to carry over).
    """
    built: dict[tuple, Path] = {}
    now = time.time()

    def make(dest: Path, **generate_kwargs) -> Path:
        key = tuple(sorted(generate_kwargs.items()))
        if key not in built:
            src = tmp_path_factory.mktemp("hermes-home") / "home"
            src.mkdir()
            hermes.run(src, [{"op": "build", "sessions": demo.generate(now, **generate_kwargs).sessions}])
            built[key] = src
        return Path(shutil.copytree(built[key], dest))

    return make


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> tuple[Path, str]:
    """(the keeper's wheel, its build log), built once from a copy of the tree: a stale
    ``build/`` in the clone (setuptools never empties it) cannot slip a deleted module into it."""
    tmp = tmp_path_factory.mktemp("wheel")
    clone = tmp / "clone"
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, clone / name)
    log = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp / "dist"), str(clone)],
        capture_output=True,
        text=True,
        check=True,
    )
    (wheel,) = (tmp / "dist").glob("hermes_keeper-*.whl")
    return wheel, log.stdout + log.stderr
