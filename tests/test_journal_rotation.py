"""The journal rotates by size into compressed generations; readers see every record across them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

import pytest
import zstandard

from hermes_keeper import demo
from hermes_keeper import journal as journal_mod
from hermes_keeper.journal import (
    GENERATION_SUFFIX,
    JOURNAL_NAME,
    ROTATE_BYTES,
    ROTATING_NAME,
    Journal,
    read_journal,
    rotate_journal,
)
from tests.keeper_proc import keeper_cmd


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    return home


def generations(keeper) -> list[str]:
    return sorted(n for n in os.listdir(keeper) if n.endswith(GENERATION_SUFFIX))


def fill(keeper, nbytes: int, tag: str) -> int:
    """Append records until the journal holds ``nbytes`` more; how many were written."""
    n = 0
    with Journal(keeper) as j:
        while (keeper / JOURNAL_NAME).stat().st_size < nbytes:
            for _ in range(500):
                j.write("file_removed", durable=False, tag=tag, n=n, path="sessions/" + "x" * 150)
                n += 1
            j.sync()
    return n


def test_a_journal_past_the_limit_is_rotated_and_still_read_whole(home):
    keeper = home / "keeper"
    written = fill(keeper, ROTATE_BYTES + 1, "first")
    assert (keeper / JOURNAL_NAME).stat().st_size > ROTATE_BYTES
    # A command under the lock (here a backup) rotates it before its first record.
    res = subprocess.run(keeper_cmd(home, "backup"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    [gen] = generations(keeper)
    assert stat.S_IMODE((keeper / gen).stat().st_mode) == 0o600
    assert (keeper / gen).stat().st_size < ROTATE_BYTES / 5  # compressed
    old = [
        json.loads(x)
        for x in zstandard.ZstdDecompressor().decompress((keeper / gen).read_bytes()).splitlines()
    ]
    assert len(old) == written and all(r["tag"] == "first" for r in old)
    current = [json.loads(x) for x in (keeper / JOURNAL_NAME).read_text().splitlines()]
    assert current and all("tag" not in r for r in current)  # the backup's records, fresh file
    records = read_journal(keeper)
    assert records == old + current  # in order, across the rotation
    assert [r["n"] for r in records[:written]] == list(range(written))


def test_only_the_newest_generations_are_kept(home, monkeypatch):
    keeper = home / "keeper"
    monkeypatch.setattr(journal_mod, "ROTATE_BYTES", 20_000)
    monkeypatch.setattr(journal_mod, "KEEP_GENERATIONS", 3)
    for round_ in range(6):
        fill(keeper, 20_000, f"round{round_}")
        assert rotate_journal(keeper) is not None
        time.sleep(0.005)  # generation names sort by their first record's millisecond
    assert len(generations(keeper)) == 3
    assert not (keeper / JOURNAL_NAME).exists()
    tags = [r["tag"] for r in read_journal(keeper)]
    assert sorted(set(tags), key=tags.index) == ["round3", "round4", "round5"]
    assert rotate_journal(keeper) is None  # nothing past the limit: nothing done


def test_a_rotation_interrupted_by_a_crash_loses_nothing(home):
    keeper = home / "keeper"
    written = fill(keeper, 50_000, "before")
    os.rename(keeper / JOURNAL_NAME, keeper / ROTATING_NAME)  # killed right after the rename
    assert len(read_journal(keeper)) == written  # readers see it meanwhile
    with Journal(keeper, rotate=True) as j:  # the next command finishes the rotation
        j.write("after")
    assert not (keeper / ROTATING_NAME).exists() and len(generations(keeper)) == 1
    records = read_journal(keeper)
    assert len(records) == written + 1 and records[-1]["action"] == "after"
    # Killed again after the generation was written but before the aside file went: no duplicate.
    gen = generations(keeper)[0]
    data = zstandard.ZstdDecompressor().decompress((keeper / gen).read_bytes())
    (keeper / ROTATING_NAME).write_bytes(data)
    rotate_journal(keeper)
    assert generations(keeper) == [gen] and len(read_journal(keeper)) == written + 1
