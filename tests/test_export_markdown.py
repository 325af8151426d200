"""``archive export --format markdown``: one readable .md per session, checked by parsing it.

The home is made by real Hermes (tests/archive_home.py): a tool call with its result,
multimodal content, rewound messages, a title and a goal; plus a turn with reasoning.
"""

from __future__ import annotations

import io
import json
import stat

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt
from ruamel.yaml import YAML

import tests.archive_home as ah
from hermes_keeper.archive.export import RESULT_CHARS, markdown
from hermes_keeper.cli import main

THINK = "think_a"


def _cli(*args):
    return CliRunner().invoke(main, ["archive", *args])


@pytest.fixture(scope="module")
def pruned_home(tmp_path_factory, hermes):
    home = ah.build(hermes, tmp_path_factory.mktemp("md") / "home")
    turns = [
        ("user", "Why is the sky blue?", {}),
        ("assistant", "Rayleigh scattering.", {"reasoning": "Short answer; the user wants the name of it."}),
    ]
    hermes.run(home, ah._session(THINK, "cli", ah.NOW - 50 * ah.DAY, turns))
    ah.prune(home, [*ah.PRUNED, THINK])
    return home


def _parse(text: str) -> tuple[dict, list]:
    """(front matter, markdown-it tokens of the body)."""
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return YAML(typ="safe", pure=True).load(io.StringIO(head)), MarkdownIt("commonmark").parse(body)


def _headings(tokens: list, level: str) -> list[str]:
    return [
        tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == level
    ]


def test_one_readable_file_per_session(pruned_home, tmp_path):
    out = tmp_path / "md" / "nested"
    res = _cli("export", "--format", "markdown", "-o", str(out), "--home", str(pruned_home))
    assert res.exit_code == 0, res.output
    assert "exported 6 sessions" in res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{s}.md" for s in [*ah.PRUNED, THINK])
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o600}

    meta, tokens = _parse((out / "old_a.md").read_text())
    assert meta["id"] == "old_a" and meta["title"] == "Walrus facts" and meta["source"] == "cli"
    assert meta["started"] < meta["ended"] and meta["started"][:4].isdigit() and "T" in meta["started"]
    assert meta["messages"] == 6 and meta["inactive_messages_not_shown"] == 2  # the rewound turn
    assert _headings(tokens, "h1") == ["Walrus facts"]
    turns = _headings(tokens, "h2")
    assert [t.split(" · ")[0] for t in turns] == [
        "User",
        "Assistant",
        "Tool result",
        "Assistant",
        "User",
        "Assistant",
    ]
    assert "`web_search`" in turns[2]
    fences = [t for t in tokens if t.type == "fence"]
    (call,) = [f for f in fences if f.info == "json"]
    assert json.loads(call.content) == {"q": "walrus"}  # the tool call's arguments
    (result,) = [f for f in fences if f.info == "text"]
    assert result.content == "Walrus tusks grow up to one metre.\nSecond line.\n"
    inline = " ".join(t.content for t in tokens if t.type == "inline")
    assert "Tool call" in inline and "web_search" in inline
    assert "ünïcødé" in inline and "look at this walrus photo" in inline
    assert "seals" not in inline  # rewound: left out, as Hermes's own views leave it out

    meta, tokens = _parse((out / f"{THINK}.md").read_text())
    html = "".join(t.content for t in tokens if t.type == "html_block")
    assert "<details>" in html and "<summary>Reasoning</summary>" in html
    assert "the user wants the name of it" in " ".join(t.content for t in tokens if t.type == "inline")


def test_only_the_chosen_sessions(pruned_home, tmp_path):
    out = tmp_path / "one"
    assert (
        _cli("export", "old_a", "--format", "markdown", "-o", str(out), "--home", str(pruned_home)).exit_code
        == 0
    )
    assert [p.name for p in out.iterdir()] == ["old_a.md"]
    out = tmp_path / "cron"
    res = _cli(
        "export", "--source", "cron", "--format", "markdown", "-o", str(out), "--home", str(pruned_home)
    )
    assert res.exit_code == 0 and [p.name for p in out.iterdir()] == ["cron_x.md"]
    meta, _ = _parse((out / "cron_x.md").read_text())
    assert meta["source"] == "cron" and meta["end_reason"] == "cron_complete"


def test_bad_use_is_one_line_and_writes_nothing(pruned_home, tmp_path):
    res = _cli("export", "--format", "markdown", "--home", str(pruned_home))
    assert res.exit_code == 2 and "-o DIR" in res.output
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    res = _cli("export", "--format", "markdown", "-o", str(link), "--home", str(pruned_home))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert not list(tmp_path.glob("*.md"))
    res = _cli(
        "export", "--format", "markdown", "-o", str(pruned_home / "keeper" / "md"), "--home", str(pruned_home)
    )
    assert res.exit_code == 2 and not (pruned_home / "keeper" / "md").exists()


def test_long_results_are_cut_and_fences_cannot_be_closed_early():
    p = ah.payload("s1", "cli", ah.NOW, title='a "quoted":\ntitle', texts=("cut off:\n```python\nx = 1",))
    p["messages"].append(
        {
            "id": 9,
            "session_id": "s1",
            "role": "tool",
            "tool_name": "cat",
            "content": "y" * (RESULT_CHARS + 500),
        }
    )
    meta, tokens = _parse(markdown(p))
    assert _headings(tokens, "h2")[1].startswith("Tool result · `cat`")
    assert meta["title"] == 'a "quoted":\ntitle' and _headings(tokens, "h1") == ['a "quoted": title']
    (fence,) = [t for t in tokens if t.type == "fence" and t.info == "text"]
    assert fence.content == "y" * RESULT_CHARS + "\n"
    assert "500 more characters not shown" in " ".join(t.content for t in tokens if t.type == "inline")
    (user_code,) = [t for t in tokens if t.type == "fence" and t.info == "python"]
    assert user_code.content == "x = 1\n"  # closed where the message ends: the next turn stays a turn
