"""Mutation testing of one module against the tests that should guard it (mutmut).

    .venv/bin/python tools/mutate.py src/hermes_keeper/model/conversations.py tests/test_conversations.py

Copies the committed tree (``git archive HEAD``) to a scratch folder, installs it with mutmut
in a virtualenv of its own under ``.cache/mutmut/`` (git-ignored: mutmut's pins never enter
ours), runs mutmut on the one module with only the given tests, and writes every mutant that
was not killed, with its diff, to ``docs/mutation/<package>.<module>.txt``: each one is either killed
by a new test or explained there as equivalent. Slow (seconds per mutant): run it before a
release, not in CI.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".cache" / "mutmut"
MUTMUT = "mutmut==3.8.1"
#: mutmut's words for a mutant a stopped run never got to
NOT_RUN = (": not checked", ": check was interrupted by user")


def _venv() -> Path:
    python = VENV / "bin" / "python"
    with FileLock(VENV.with_suffix(".lock")):
        if python.exists():
            return python
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MUTMUT], check=True)
    return python


def _report_name(module: str) -> str:
    """``run/plan.py`` -> ``run.plan.txt``: two modules of one name (the two ``restore.py``) stay apart."""
    parts = Path(module).with_suffix("").parts
    return ".".join(parts[parts.index("hermes_keeper") + 1 :]) + ".txt"


def _run_for(cmd: list[str], cwd: Path, minutes: float | None) -> bool:
    """Run ``cmd`` (in a process group of its own, with its workers) for at most ``minutes``;
    whether it was stopped. mutmut keeps each mutant's result as it goes, so a stopped run still
    reports the mutants it tested (the rest: not run)."""
    proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True)
    try:
        proc.wait(timeout=None if minutes is None else minutes * 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        return True
    if proc.returncode:
        raise SystemExit(f"mutmut run failed ({proc.returncode})")
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="src/hermes_keeper/... .py to mutate")
    ap.add_argument("tests", nargs="+", help="test files that should kill its mutants")
    ap.add_argument("--children", type=int, default=2, help="mutants tested at once")
    ap.add_argument("--minutes", type=float, help="stop after this long and report the mutants tested")
    args = ap.parse_args()
    python = _venv()
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        work = Path(tmp)
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
        (work / ".cache").symlink_to(ROOT / ".cache")  # real Hermes for the tests that need it
        with FileLock(VENV.with_suffix(".lock")):  # runs side by side share the venv; one install at a time
            subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", ".[dev]"], cwd=work, check=True)
        with open(work / "pyproject.toml", "a", encoding="utf-8") as fh:
            tests = ", ".join(f'"{t}"' for t in args.tests)
            fh.write(
                f'\n[tool.mutmut]\nsource_paths = ["src/"]\nonly_mutate = ["{args.module}"]\n'
                'also_copy = ["bench"]\n'  # tests that build their homes with bench/ (test_compact)
                f"pytest_add_cli_args_test_selection = [{tests}]\n"
            )
        mutmut = [str(python), "-m", "mutmut"]  # not bin/mutmut: its #! names the folder that made the venv
        started = time.monotonic()
        stopped = _run_for([*mutmut, "run", "--max-children", str(args.children)], work, args.minutes)
        took = (time.monotonic() - started) / 60
        results = subprocess.run(
            [*mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True
        )
        rows = [line.strip() for line in results.stdout.splitlines() if ":" in line]
        unrun = [r for r in rows if r.endswith(NOT_RUN)]
        rows = [r for r in rows if not r.endswith(NOT_RUN)]
        killed = sum(r.endswith(": killed") for r in rows)
        timeouts = sum(r.endswith(": timeout") for r in rows)
        left = [r for r in rows if not r.endswith((": killed", ": timeout"))]
        lines = [
            f"# mutmut {MUTMUT.split('==')[1]} on {args.module} with {' '.join(args.tests)}",
            f"# {len(rows)} mutants: {killed} killed, {timeouts} timed out (detected), {len(left)} left",
            f"# score: {(killed + timeouts) / max(1, len(rows)):.1%} in {took:.0f} min"
            + (f"; stopped at {args.minutes} min with {len(unrun)} mutants not run" if stopped else ""),
            "",
        ]
        for row in left:
            name = row.split(":")[0]
            diff = subprocess.run([*mutmut, "show", name], cwd=work, capture_output=True, text=True).stdout
            changed = [d for d in diff.splitlines() if d[:1] in "+-" and d[:3] not in ("+++", "---")]
            lines += [row, *changed, ""]
    out = ROOT / "docs" / "mutation" / _report_name(args.module)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:3]))
    print(f"written: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
