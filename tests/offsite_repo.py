"""Real restic repositories for the off-host tests: a local folder, or an S3 bucket on a moto
server the test starts on 127.0.0.1. Nothing reaches beyond loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PASSWORD = "correct horse battery staple"


def restic(repo: str, password_file: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["restic", "--repo", repo, "--password-file", str(password_file), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        **kw,
    )


def init_repository(repo: str, folder: Path) -> Path:
    """``restic init`` of ``repo``; the password file (0600, in ``folder``)."""
    pw = folder / "restic-password"
    pw.write_text(PASSWORD + "\n")
    pw.chmod(0o600)
    restic(repo, pw, "init")
    return pw


def offsite_toml(repo: str, password_file: Path, host: str = "old-machine", **more) -> str:
    lines = [f'repository = "{repo}"', f'password_file = "{password_file}"', f'host = "{host}"']
    lines += [f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in more.items()]
    return "[offsite]\n" + "\n".join(line.replace("'", '"') for line in lines) + "\n"


def local_offsite(home: Path, folder: Path, **more) -> tuple[str, Path]:
    """A local-folder restic repository in ``folder``, named by ``home``'s keeper.toml."""
    repo = str(folder / "restic-repo")
    pw = init_repository(repo, folder)
    with open(home / "keeper.toml", "a") as fh:
        fh.write(offsite_toml(repo, pw, **more))
    return repo, pw


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_s3(env: dict) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (its own process); yields its endpoint URL. ``env`` gets
    the fake credentials restic reads from its environment."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # bounded: the server answers within seconds or the test fails
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        env |= {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
