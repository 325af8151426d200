"""``--all-profiles``: one bad profile never stops the others; symlinked profiles (issue 34)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.home import Profile, each, exit_code, select_profiles
from tests.conftest import tree_digest

NAMES = ("alpha", "bravo", "charlie")


def keeper(*args):
    return subprocess.run([sys.executable, "-m", "hermes_keeper", *args], capture_output=True, text=True)


def _damage_a_messages_page(db) -> None:
    """Scribble over a leaf page of ``messages``: every read of the table fails with
    ``database disk image is malformed`` (an ``sqlite3.DatabaseError``, no refusal of the keeper's)."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = [
        r[0]
        for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY pageno"
        )
    ]
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((pages[len(pages) // 2] - 1) * page_size)
        fh.write(b"\xff" * 64)


@pytest.fixture
def home(tmp_path):
    """A home whose first profile (``alpha``) has a damaged page; ``bravo`` and ``charlie`` after it."""
    root = tmp_path / "home"
    now = time.time()
    demo.build_home(root, demo.generate(now, sessions=30))
    for name in NAMES:
        demo.build_home(root / "profiles" / name, demo.generate(now, sessions=30))
    _damage_a_messages_page(root / "profiles" / "alpha" / "state.db")
    return root


@pytest.mark.parametrize("command", ["run", "report", "plan"])
def test_a_damaged_profile_is_named_and_the_later_ones_still_run(home, command):
    """Was: ``SQLite: database disk image is malformed`` with no profile name, exit 1, and
    ``bravo`` and ``charlie`` never ran (each() caught only refusals and OSError)."""
    res = keeper(command, "--home", str(home), "--all-profiles", "--json")
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        "hermes-keeper: alpha: SQLite: database disk image is malformed (run with --debug for details)"
    ]
    rows = {row["profile"]: row for row in json.loads(res.stdout)["profiles"]}
    assert list(rows) == ["default", *NAMES]
    assert "malformed" in rows["alpha"]["error"]
    assert all("error" not in rows[name] for name in ("default", "bravo", "charlie"))


def test_check_names_the_damaged_profile_and_checks_the_others(home):
    """Was: ``HERMES-KEEPER UNKNOWN - SQLite: ...`` for the whole home, no profile checked."""
    res = keeper("check", "--home", str(home), "--all-profiles", "--json")
    doc = json.loads(res.stdout)
    rows = {row["profile"]: row for row in doc["profiles"]}
    assert "alpha: SQLite: database disk image is malformed" in doc["line"]
    assert "malformed" in rows["alpha"]["error"]
    assert all(rows[name].get("status") for name in ("default", "bravo", "charlie")), rows
    assert res.returncode == doc["code"] >= 2  # CRITICAL (never ran, no backup) or UNKNOWN: the worst


def test_debug_shows_the_damaged_profile_s_traceback_and_still_runs_the_others(home):
    res = keeper("--debug", "plan", "--home", str(home), "--all-profiles")
    assert res.returncode == 1
    assert "Traceback" in res.stderr and "sqlite3.DatabaseError" in res.stderr
    assert "== charlie plan ==" in res.stdout


def test_each_isolates_any_exception_and_the_exit_code_is_the_worst(tmp_path):
    """The library's loop: a bug in one profile is its own outcome, with the boundary's line."""
    profiles = [Profile(n, tmp_path / n, tmp_path) for n in ("a", "b", "c")]
    for p in profiles:
        p.home.mkdir()
        (p.home / "state.db").touch()

    def action(p):
        if p.name == "b":
            raise ZeroDivisionError("boom")
        return p.name

    outcomes = list(each(profiles, action))
    assert [o.value for o in outcomes] == ["a", None, "c"]
    assert outcomes[1].error == "unexpected error: ZeroDivisionError: boom (run with --debug for details)"
    assert isinstance(outcomes[1].exception, ZeroDivisionError) and outcomes[1].exit_code == 1
    assert exit_code(outcomes) == 1
    assert exit_code(list(each(profiles[1:2] * 2, action))) == 1  # nothing ran: the failures' own code


def test_symlinked_profiles_are_followed_or_reported(tmp_path):
    """A profile moved to another disk and linked back is kept like any other (was: silently left
    out of --all-profiles); a link to nothing, to the home, or to another profile's folder is a
    note naming it, and nothing behind it changes."""
    root, moved = tmp_path / "home", tmp_path / "disk2" / "work"
    now = time.time()
    demo.build_home(root, demo.generate(now, sessions=30))
    demo.build_home(root / "profiles" / "bravo", demo.generate(now, sessions=30))
    demo.build_home(moved, demo.generate(now, sessions=30))
    links = root / "profiles"
    (links / "work").symlink_to(moved)
    (links / "loop").symlink_to("..")
    (links / "twin").symlink_to("bravo")
    (links / "gone").symlink_to(tmp_path / "nowhere")
    res = keeper("run", "--home", str(root), "--all-profiles", "--json")
    assert res.returncode == 0, res.stderr
    rows = {row["profile"]: row for row in json.loads(res.stdout)["profiles"]}
    assert rows["work"]["pruned"] > 0 and (moved / "keeper" / "archive.db").is_file()
    assert (
        "is a symlink to" in rows["loop"]["skipped_because"]
        and "holds the home" in rows["loop"]["skipped_because"]
    )
    assert "the folder of profile 'bravo'" in rows["twin"]["skipped_because"]
    assert "not a folder" in rows["gone"]["skipped_because"]
    assert rows["bravo"]["pruned"] > 0  # once, as itself
    assert sorted(line.split(":")[1].strip() for line in res.stderr.splitlines()) == ["gone", "loop", "twin"]
    assert not (tmp_path / "nowhere").exists()
    before = tree_digest(root)
    refused = keeper("run", "--home", str(root), "--profile", "twin")
    assert refused.returncode == 2 and "not followed" in refused.stderr
    assert tree_digest(root) == before


def _damage_the_cell_offsets_of_an_interior_page(db) -> None:
    """An interior page of ``messages`` whose cell offsets point nowhere: ``quick_check`` gives
    several rows, the first holding a line break (``*** in database main ***\\nOn tree page ...``)."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    (page,) = conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'internal' ORDER BY pageno"
    ).fetchone()
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((page - 1) * page_size + 12)
        fh.write(b"\x00\x00\xff\xff" * 8)


def test_a_quick_check_failure_under_all_profiles_is_one_line(tmp_path):
    """Was: 6 stderr lines (SQLite's rows, and the line breaks inside them, went out as they were)."""
    root = tmp_path / "home"
    now = time.time()
    demo.build_home(root, demo.generate(now, sessions=30))
    demo.build_home(root / "profiles" / "alpha", demo.generate(now, sessions=30))
    _damage_the_cell_offsets_of_an_interior_page(root / "profiles" / "alpha" / "state.db")
    res = keeper("compact", "--home", str(root), "--all-profiles", "--quiet")
    assert res.returncode == 1
    (line,) = res.stderr.splitlines()
    assert line.startswith("hermes-keeper: alpha: ") and "fails quick_check (On tree page" in line
    assert "; On tree page" in line and "***" not in line


def test_hermes_home_inside_a_symlinked_profile_names_it_under_its_root(tmp_path):
    """``hermes -p work`` sets HERMES_HOME to ``<root>/profiles/work``; when that is a link to
    another disk it is still profile ``work`` of ``<root>`` (one keeper lock for the home). Was:
    the link's target taken for a home of its own, profile ``default``, with its own lock."""
    root, moved = tmp_path / "home", tmp_path / "disk2" / "elsewhere"
    root.mkdir()
    moved.mkdir(parents=True)
    (root / "profiles").mkdir()
    (root / "profiles" / "work").symlink_to(moved)
    (picked,) = select_profiles(env={"HERMES_HOME": str(root / "profiles" / "work")})
    assert (picked.name, picked.root, picked.home.resolve()) == ("work", root.resolve(), moved.resolve())


def test_a_profile_s_failure_line_is_escaped_for_the_terminal(tmp_path):
    """The line naming one profile's failure (its path is the user's, any bytes) goes through the
    terminal escaping the one-profile error line has (was: printed raw under --all-profiles)."""
    root = tmp_path / "we\x1b[31mird\u2028home"
    demo.build_home(root, demo.generate(time.time(), sessions=5))
    (root / "profiles" / "alpha").mkdir(parents=True)
    (root / "profiles" / "alpha" / "state.db").write_bytes(b"not a database\n" * 50)
    res = keeper("report", "--home", str(root), "--all-profiles")
    assert res.returncode == 1
    (line,) = res.stderr.splitlines()
    assert line.startswith("hermes-keeper: alpha: ") and "we\\x1b[31mird\\u2028home" in line


def test_a_damaged_archive_is_named_and_the_other_archives_are_still_read(tmp_path):
    """``archive list`` and ``archive search`` went through no :func:`each`: one archive that is
    no database stopped both for every profile, unnamed. Now its line, an ``error`` row, exit 1."""
    root = tmp_path / "home"
    now = time.time()
    demo.build_home(root, demo.generate(now, sessions=20))
    demo.build_home(root / "profiles" / "alpha", demo.generate(now, sessions=20))
    assert keeper("run", "--home", str(root), "--all-profiles", "--quiet").returncode == 0
    (root / "keeper" / "archive.db").write_bytes(b"not a database\n" * 500)
    listed = keeper("archive", "list", "--home", str(root), "--all-profiles", "--json")
    assert listed.returncode == 1
    default, alpha = json.loads(listed.stdout)["profiles"]
    assert "cannot open the archive" in default["error"] and alpha["sessions"]
    (line,) = listed.stderr.splitlines()
    assert line.startswith("hermes-keeper: default: ") and "cannot open the archive" in line
    found = keeper("archive", "search", "the", "--home", str(root), "--all-profiles")
    assert found.returncode == 1 and "alpha: " in found.stdout and "archived sessions match" in found.stdout


def test_adopt_all_profiles_goes_on_past_a_config_it_cannot_edit(tmp_path):
    """``adopt --all-profiles``: a config.yaml that is not YAML in one profile was a refusal for
    the whole command, the later profiles never adopted. Now it is named, the others changed."""
    root = tmp_path / "home"
    for home in (root, root / "profiles" / "alpha", root / "profiles" / "bravo"):
        demo.build_home(home, demo.generate(time.time(), sessions=5))
        (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    (root / "profiles" / "alpha" / "config.yaml").write_text("sessions: [unclosed\n")
    res = keeper("adopt", "--home", str(root), "--all-profiles", "--yes")
    assert res.returncode == 1
    (line,) = res.stderr.splitlines()
    assert line.startswith("hermes-keeper: alpha: ") and "not valid YAML" in line
    assert (root / "profiles" / "alpha" / "config.yaml").read_text() == "sessions: [unclosed\n"
    for home in (root, root / "profiles" / "bravo"):
        assert "auto_prune: false" in (home / "config.yaml").read_text()
