"""Hermes's CJK search index on a test home: a stand-in tokenizer, compiled here.

Hermes loads ``cjk_unicode61`` from ``<home>/lib/libfts5_cjk.so`` (``hermes_state_fts.py``), built
from upstream's ``native/fts5_cjk/`` C source, which is not in the wheel. ``fts5_cjk_standin.c``
registers a tokenizer of the same name (unicode61 with CJK runs as bigrams, as upstream's): a
stand-in, compiled with gcc against SQLite's headers (Debian's ``libsqlite3-dev``). Missing
gcc or headers fail the test: it must not skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from hermes_keeper.sqlite.connect import CJK_LIBRARY
from tests.hermes_env import extension_python

SOURCE = Path(__file__).resolve().parent / "fts5_cjk_standin.c"
SRC = Path(__file__).resolve().parent.parent / "src"


def compile_standin(folder: Path) -> Path:
    """The stand-in built into ``folder``: the path of its ``libfts5_cjk.so``."""
    out = folder / CJK_LIBRARY[-1]
    proc = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"compiling the cjk_unicode61 stand-in needs gcc and libsqlite3-dev:\n{proc.stderr}"
        )
    return out


def install(library: Path, home: Path) -> Path:
    """``library`` at ``<home>/lib/libfts5_cjk.so``, where Hermes (and the keeper) load it from."""
    dest = home.joinpath(*CJK_LIBRARY)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(library, dest)
    dest.chmod(0o755)
    return dest


def keeper_loading_extensions(home: Path, *args: str) -> subprocess.CompletedProcess:
    """``hermes-keeper ARGS --home HOME`` by a Python that can load SQLite extensions: the tests'
    own where it can, else Debian's ``/usr/bin/python3`` with our virtualenv's packages
    (:func:`tests.hermes_env.extension_python`); ``src`` first on its path either way."""
    python, site = extension_python(Path(sys.executable))
    # another interpreter gets our packages; ours keeps its own path
    path = [str(SRC), site] if site else [str(SRC), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PYTHONPATH": ":".join(path)}
    return subprocess.run(
        [python, "-m", "hermes_keeper", *args, "--home", str(home)], capture_output=True, text=True, env=env
    )
