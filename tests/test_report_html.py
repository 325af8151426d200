"""`report --html`: a self-contained page, every database string escaped, rendered by a real
headless Chromium with no console error and charts that are not blank."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import subprocess
import time
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from PIL import Image

from hermes_keeper import demo
from hermes_keeper.report_html import ProfilePage, projection
from tests.keeper_proc import keeper_cmd

EVIL = '<script>alert("x")</script><img src=http://example.invalid/p.png>'
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]


def parsed_tags(text: str) -> list[tuple[str, list]]:
    """Every start tag of the page with its attributes, as a browser's tokenizer sees them."""
    tags: list[tuple[str, list]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append((tag, attrs))

    Collect().feed(text)
    return tags


def keeper(home, *args):
    return subprocess.run(keeper_cmd(home, *args), capture_output=True, text=True)


def chromium(tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium (Debian's package; CI installs it in .ci/run) on ``url``."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed (.ci/run installs Debian's chromium)"
    profile = tmp_path / f"chromium-{time.monotonic_ns()}"
    cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_problems(stderr: str) -> list[str]:
    """Console messages of the page (Chromium logs them as ``CONSOLE:line]``) and failed loads."""
    return [
        line
        for line in stderr.splitlines()
        if re.search(r"CONSOLE[:(]\d+|Refused to|net::ERR_|Uncaught", line)
    ]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A demo home with a hostile source and title, reported, run, reported to HTML."""
    tmp = tmp_path_factory.mktemp("html")
    home = tmp / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=80))
    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE sessions SET source = ?, title = ? || rowid WHERE rowid % 9 = 0", (EVIL, EVIL))
    conn.commit()
    conn.close()
    assert keeper(home, "report").returncode == 0
    assert keeper(home, "run").returncode == 0
    out = tmp / "report.html"
    res = keeper(home, "report", "--html", str(out))
    assert res.returncode == 0, res.stderr
    assert f"html: {out}" in res.stdout
    return out


def test_the_page_is_private_self_contained_and_escaped(page):
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    text = page.read_text()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text  # the source, shown as text
    tags = parsed_tags(text)
    assert not {"script", "img", "iframe", "object"} & {t for t, _a in tags}
    links = [v for _t, attrs in tags for k, v in attrs if k in ("src", "href") and v]
    assert links == ["data:,"]  # the empty favicon: nothing is fetched
    assert "default-src 'none'" in text
    assert text.count("<svg") == 4
    for chart in ("disk use over time by component", "sessions by source and age", "growth projection"):
        assert f'aria-label="{chart}"' in text
    assert 'aria-label="bytes each run freed"' in text


def test_chromium_renders_the_charts_with_no_console_error(page, tmp_path):
    url = page.as_uri()
    dom = chromium(tmp_path, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == 4 and dom.stdout.count("<rect") > 50
    assert dom.stdout.count("<polyline") == 2
    assert "<script" not in dom.stdout  # the hostile source stayed text in the DOM too
    assert console_problems(dom.stderr) == []

    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, url, "--window-size=900,2000", f"--screenshot={shot}")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    assert console_problems(res.stderr) == []
    if out := os.environ.get("HERMES_KEEPER_SHOT"):  # keep one to look at
        shutil.copy(shot, out)
    img = Image.open(shot).convert("RGB")
    assert img.size == (900, 2000)
    colours = img.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # text, palette, antialiasing: not a blank or one-colour page
    non_white = sum(n for n, rgb in colours if sum(rgb) < 3 * 240)
    assert non_white / (900 * 2000) > 0.05
    palette = {(0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0xE1, 0x57, 0x59), (0x59, 0xA1, 0x4F)}
    assert palette <= {rgb for _n, rgb in colours}  # the charts' own colours are on screen


def test_the_console_check_sees_an_error(tmp_path):
    """The scan above is real: a page that logs an error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('boom')</script></body></html>")
    res = chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert any("boom" in line for line in console_problems(res.stderr)), res.stderr[-2000:]


def _page(**over) -> ProfilePage:
    rep = SimpleNamespace(  # the parts of a Report the projection reads
        database=SimpleNamespace(bytes=1_000_000_000, reclaimable_bytes=100_000_000),
        growth=SimpleNamespace(last_30d=SimpleNamespace(bytes_per_day=5_000_000)),
    )
    return ProfilePage(rep, {"prune": {"est_bytes": 600_000_000}}, 90.0, over.get("budget"), [])


def test_the_projection_with_the_policy_levels_off():
    series = projection(_page())
    without, kept = series.values()
    assert without[0] == (0, 1_000_000_000)  # the file, free pages filled first
    assert dict(without)[365] == 900_000_000 + 365 * 5_000_000
    assert dict(kept)[0] == 300_000_000  # the prune set gone after the next run
    assert dict(kept)[90] == dict(kept)[365] == 300_000_000 + 90 * 5_000_000  # retention caps it
    assert all(k <= w for (_d, k), (_e, w) in zip(kept, without, strict=True))
    capped = projection(_page(budget=500_000_000))
    assert max(y for _d, y in list(capped.values())[1]) == 500_000_000


def test_an_html_target_in_a_missing_folder_is_refused_before_anything(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    res = keeper(home, "report", "--html", str(tmp_path / "nowhere" / "r.html"))
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""
    res = keeper(home, "report", "--html", str(home / "state.db"))
    assert res.returncode == 2 and "file of the Hermes home" in res.stderr
    assert not (home / "keeper").exists()  # refused before the report recorded anything
