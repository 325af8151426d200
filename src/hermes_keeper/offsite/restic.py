"""restic, driven as a subprocess with ``--json``: the one place the keeper talks to it.

Credentials reach restic only the ways restic itself takes them: its environment
(``RESTIC_PASSWORD*``, ``AWS_*``, ``B2_*``, ... passed through untouched) and the
``--password-file``/``--password-command`` keeper.toml names (a path, a command: never a
secret). Every failure becomes one line and an exit code (:func:`classify`): 75 for what
fixes itself (unreachable, locked, too slow), 2 for what a person must fix (password,
no repository, writes refused, restic missing).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hermes_keeper import units
from hermes_keeper.errors import KeeperError, TryLater

INSTALL = "restic is not installed: `apt install restic` (or https://restic.net); nothing left the host"

#: stderr text -> (exception class, what the line says). First match wins: an unreachable S3
#: endpoint also prints "Is there a repository at the following location?".
FAILURES: tuple[tuple[tuple[str, ...], type[KeeperError], str], ...] = (
    (("wrong password", "no key found"), KeeperError, "wrong restic password for {repo}"),
    (
        ("access denied", "accessdenied", "403 forbidden", "permission denied", "read-only file system"),
        KeeperError,
        "restic repository {repo} refuses writes ({detail}); nothing lost locally",
    ),
    (
        ("repository is already locked", "locked exclusively"),
        TryLater,
        "restic repository {repo} is locked by another restic; nothing lost, try again later",
    ),
    (
        (
            "connection refused",
            "no such host",
            "network is unreachable",
            "i/o timeout",
            "connection reset",
            "context deadline exceeded",
            "server misbehaving",
        ),
        TryLater,
        "restic repository {repo} unreachable ({detail}); nothing lost, the next run sends it",
    ),
    (
        ("is there a repository at", "repository does not exist", "unable to open config file"),
        KeeperError,
        "no restic repository at {repo}: create it once with `restic -r {repo} init`",
    ),
)


def _detail(stderr: str, needle: str = "") -> str:
    """The line restic wrote that says ``needle``, else its last ``Fatal:`` line, else its last."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if needle and needle in ln.lower()]
    fatal = [ln for ln in lines if ln.startswith("Fatal:")]
    line = (said or fatal or lines or ["no message"])[-1]
    return line.removeprefix("Fatal: ")[-200:]


def classify(repo: str, code: int, stderr: str) -> KeeperError:
    """restic's exit ``code`` and ``stderr`` as the keeper's one-line error."""
    low = stderr.lower()
    for needles, cls, text in FAILURES:
        for needle in needles:
            if needle in low:
                return cls(text.format(repo=repo, detail=_detail(stderr, needle)))
    if code < 0:  # killed by a signal: whatever it wrote is unreferenced, the next push redoes it
        name = signal.Signals(-code).name
        return TryLater(f"restic was stopped ({name}); nothing lost, the next run sends it")
    return KeeperError(f"restic failed (exit {code}): {_detail(stderr)}")


@dataclass(frozen=True)
class Restic:
    """One repository and how to open it; each method runs one restic command."""

    repository: str
    password_file: str | None = None
    password_command: str | None = None
    timeout_s: float = 3600.0

    @classmethod
    def from_settings(cls, offsite: dict) -> Restic | None:
        """From a policy's ``[offsite]`` settings; None where no repository is configured."""
        if not offsite.get("repository"):
            return None
        pw = offsite.get("password_file")
        return cls(
            offsite["repository"],
            str(Path(pw).expanduser()) if pw else None,
            offsite.get("password_command"),
            offsite.get("timeout") or 3600.0,
        )

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        binary = shutil.which("restic")
        if binary is None:
            raise KeeperError(INSTALL)
        argv = [binary, "--repo", self.repository]
        if self.password_file:
            argv += ["--password-file", self.password_file]
        if self.password_command:
            argv += ["--password-command", self.password_command]
        return argv + list(args)

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        feed: Callable[[IO[bytes]], None] | None = None,
    ) -> str:
        """restic ``args``: its stdout; ``feed(stdin)`` writes what ``--stdin`` reads.

        Stopped (SIGTERM, then SIGKILL) after ``timeout_s``: a stalled endpoint never holds a run.
        A lock in the way is tried once more after ``restic unlock``, which removes only stale
        locks (a restic killed midway leaves its own; a live one's stays and is said).
        """
        try:
            return self._run(args, cwd, feed)
        except TryLater as exc:
            if "locked" not in str(exc):
                raise
            self._run(("unlock",), None, None)
            return self._run(args, cwd, feed)

    def _run(self, args: tuple[str, ...], cwd: Path | None, feed: Callable[[IO[bytes]], None] | None) -> str:
        env = os.environ | {"TZ": "UTC", "RESTIC_PROGRESS_FPS": "0.016"}  # --time is read in UTC
        with _spool() as out, _spool() as err:
            proc = subprocess.Popen(
                self._argv(args),
                stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=cwd,
                env=env,
            )
            late = threading.Event()
            timer = threading.Timer(self.timeout_s, lambda: (late.set(), _stop(proc)))
            timer.start()
            try:
                if feed is not None:
                    try:
                        feed(proc.stdin)
                        proc.stdin.close()
                    except BrokenPipeError:  # restic gave up early: its stderr says why
                        pass
                code = proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:  # interrupted while feeding it
                    _stop(proc)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if code != 0:
            if late.is_set():
                raise TryLater(
                    f"restic took longer than {units.duration(self.timeout_s)} ([offsite] timeout): "
                    "stopped; nothing lost, the next run sends it"
                )
            raise classify(self.repository, code, stderr)
        return stdout

    def json(self, *args: str, **kw) -> list | dict:
        """``run`` with ``--json``: the parsed output (the last JSON line of a streaming command)."""
        text = self.run(*args, "--json", **kw)
        for line in reversed(text.splitlines()):  # forget --prune adds prune's text after its JSON
            if line.startswith(("{", "[{", "[]")):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        if text.strip():
            raise KeeperError(f"restic printed no JSON for {args[0]}; is it restic >= 0.12?")
        return []


@contextmanager
def _spool() -> Iterator[IO[bytes]]:
    """An unnamed temporary file for restic's output: no pipe to fill and deadlock on."""
    with tempfile.TemporaryFile() as fh:
        yield fh


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)  # restic removes its lock on SIGTERM
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
