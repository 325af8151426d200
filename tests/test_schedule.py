"""``schedule install|show|remove`` through each scheduler.

Hermes: the real Hermes (three versions, their own virtualenvs) lists the job as a no-agent job
and runs it, delivering the keeper's summary. systemd: ``systemd-analyze verify`` accepts the
units (present on this machine and in CI). cron: a fake ``crontab`` on PATH keeps the table in
a file, and the installed line's command is run as cron's shell would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from tests.conftest import tree_digest
from tests.hermes_env import IOT, hermes_python
from tests.keeper_proc import keeper_cmd

FAKE_CRONTAB = """#!/bin/sh
if [ "$1" = "-l" ]; then
  [ -f "$FAKE_CRONTAB" ] && exec cat "$FAKE_CRONTAB"
  echo "no crontab for $(id -un)" >&2; exit 1
fi
[ "$1" = "-" ] && exec cat > "$FAKE_CRONTAB"
exit 2
"""
FAKE_SYSTEMCTL = '#!/bin/sh\necho "$@" >> "$FAKE_SYSTEMCTL_LOG"\n'


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    return home


@pytest.fixture
def env(tmp_path):
    """PATH with the fake crontab and systemctl first; the user config folder in tmp."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("crontab", FAKE_CRONTAB), ("systemctl", FAKE_SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return os.environ | {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_CRONTAB": str(tmp_path / "crontab.txt"),
        "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.log"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }


def keeper(home, *args, env=None, check=True):
    out = subprocess.run(keeper_cmd(home, "schedule", *args), capture_output=True, text=True, env=env)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def in_hermes(spec: str, home: Path, code: str):
    """``code`` in the real Hermes's Python with HERMES_HOME=home; its last stdout line as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HERMES_HOME": str(home)}
    out = subprocess.run(
        [str(hermes_python(spec)), "-I", "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


LIST_AND_RUN = """
import json
from cron.jobs import list_jobs
from cron.scheduler import run_job
jobs = list_jobs(include_disabled=True)
ok, _doc, final, err = run_job(jobs[0])
print(json.dumps({"jobs": jobs, "ok": ok, "final": final, "error": err}, default=str))
"""


def systemd_verifies(tmp_path, files) -> None:
    """systemd's own parser accepts the units (``systemd-analyze --user verify``)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "--user", "verify", *map(str, files)],
        capture_output=True,
        text=True,
        env=os.environ | {"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert verify.returncode == 0, verify.stderr


@pytest.mark.parametrize("spec", ["0.19.0", IOT, "0.13.0"])
def test_hermes_lists_and_runs_the_no_agent_job(home, spec):
    python = str(hermes_python(spec))
    keeper(home, "install", "--via", "hermes", "--hermes", python)
    jobs_json = (home / "cron" / "jobs.json").read_bytes()
    again = keeper(home, "install", "--via", "hermes", "--hermes", python)
    assert (home / "cron" / "jobs.json").read_bytes() == jobs_json  # idempotent: not even rewritten
    assert again.stdout.count("unchanged") == 2

    got = in_hermes(spec, home, LIST_AND_RUN)
    [job] = got["jobs"]
    assert job["no_agent"] is True and job["script"] == "hermes-keeper.sh" and job["deliver"] == "origin"
    assert job["schedule"]["expr"] == "30 3 * * *" and job["enabled"] is True
    # Hermes ran the script: the keeper's run, its one-line summary as the message to deliver
    assert got["ok"] is True and got["error"] is None
    assert re.fullmatch(r"default: zombies closed \d+, pruned \d+, .* messages", got["final"]), got["final"]
    assert (home / "keeper" / "journal.jsonl").exists()
    script = (home / "scripts" / "hermes-keeper.sh").read_text()
    assert f"--home {home}" in script and "--profile default" in script
    assert (home / "scripts" / "hermes-keeper.sh").stat().st_mode & 0o077 == 0

    keeper(home, "remove", "--via", "hermes", "--hermes", python)
    assert (
        in_hermes(
            spec, home, "import json; from cron.jobs import list_jobs; print(json.dumps(list_jobs(True)))"
        )
        == []
    )
    assert not (home / "scripts" / "hermes-keeper.sh").exists()


def test_hermes_dry_run_prints_the_record_and_changes_nothing(home):
    python = str(hermes_python("0.19.0"))
    keeper(home, "install", "--via", "hermes", "--hermes", python, "--every", "monthly", "--at", "4:05")
    before = tree_digest(home)
    out = keeper(home, "install", "--via", "hermes", "--hermes", python, "--at", "02:00", "--dry-run")
    assert tree_digest(home) == before
    assert "would be replaced" in out.stdout and '"expr": "0 2 * * *"' in out.stdout
    assert '"no_agent": true' in out.stdout and "exec " in out.stdout
    shown = keeper(home, "show", "--via", "hermes", "--hermes", python).stdout
    # Hermes's own next run (the 1st at 04:05), not its 40-line record (that is in --json)
    assert re.search(r"hermes: next run: \d{4}-\d\d-01T04:05:00", shown) and '"expr"' not in shown
    doc = json.loads(keeper(home, "show", "--via", "hermes", "--hermes", python, "--json").stdout)
    assert '"expr": "5 4 1 * *"' in doc["profiles"][0]["changes"][0]["text"]


def test_hermes_not_found_is_one_line(home, env):
    out = keeper(
        home, "install", "--via", "hermes", env=env | {"PATH": env["PATH"].split(":")[0]}, check=False
    )
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Hermes not found" in out.stderr
    assert not (home / "scripts").exists()


def test_systemd_units_verify_and_install_idempotently(home, env, tmp_path):
    dry = keeper(home, "install", "--via", "systemd", "--every", "weekly", "--dry-run", env=env).stdout
    units = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    assert not units.exists()
    keeper(home, "install", "--via", "systemd", "--every", "weekly", env=env)
    files = sorted(units.iterdir())
    assert [f.suffix for f in files] == [".service", ".timer"]
    for f in files:  # the dry run printed exactly what was then written
        assert f.read_text().rstrip("\n") in dry
    service, timer = (f.read_text() for f in files)
    assert "Nice=10" in service and "IOSchedulingClass=idle" in service and "Type=oneshot" in service
    assert (
        "Persistent=true" in timer
        and "RandomizedDelaySec=" in timer
        and "OnCalendar=Sun *-*-* 03:30:00" in timer
    )
    argv = shlex.split(service.split("ExecStart=", 1)[1].splitlines()[0])
    assert Path(argv[0]).is_absolute() and argv[1:] == [
        "run",
        "--quiet",
        "--home",
        str(home),
        "--profile",
        "default",
    ]

    systemd_verifies(tmp_path, files)
    assert "enable --now hermes-keeper-default-" in Path(env["FAKE_SYSTEMCTL_LOG"]).read_text()

    assert (
        keeper(home, "install", "--via", "systemd", "--every", "weekly", env=env).stdout.count("unchanged")
        == 2
    )
    keeper(home, "remove", "--via", "systemd", env=env)
    assert list(units.iterdir()) == []
    assert "disable --now" in Path(env["FAKE_SYSTEMCTL_LOG"]).read_text()


def test_cron_line_runs_and_leaves_other_lines_alone(home, env):
    table = Path(env["FAKE_CRONTAB"])
    table.write_text("MAILTO=me@example.org\n15 * * * * /usr/local/bin/backup-photos\n")
    dry = keeper(home, "install", "--via", "cron", "--dry-run", env=env).stdout
    assert table.read_text().count("\n") == 2
    keeper(home, "install", "--via", "cron", env=env)
    lines = table.read_text().splitlines()
    assert lines[:2] == ["MAILTO=me@example.org", "15 * * * * /usr/local/bin/backup-photos"]
    [ours] = lines[2:]
    assert ours in dry
    fields = ours.split(" ", 5)
    assert fields[:5] == ["30", "3", "*", "*", "*"]
    # what cron does with the line: /bin/sh -c the rest; the quiet run prints nothing
    ran = subprocess.run(
        ["/bin/sh", "-c", fields[5]], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert '"action": "summary"' in (home / "keeper" / "journal.jsonl").read_text()

    keeper(home, "install", "--via", "cron", env=env)
    assert table.read_text().splitlines()[2:] == [ours]
    keeper(home, "install", "--via", "cron", "--every", "monthly", "--at", "23:59", env=env)
    [replaced] = table.read_text().splitlines()[2:]
    assert replaced.startswith("59 23 1 * * ")
    assert "found" in keeper(home, "show", "--via", "cron", env=env).stdout
    keeper(home, "remove", "--via", "cron", env=env)
    assert table.read_text().splitlines() == lines[:2]


def test_show_and_remove_every_way(home, env):
    keeper(home, "install", "--via", "cron", env=env)
    out = keeper(home, "show", "--json", env=env | {"PATH": env["PATH"].split(":")[0] + ":/usr/bin:/bin"})
    doc = json.loads(out.stdout)
    assert doc["command"] == "schedule show" and [r["profile"] for r in doc["profiles"]] == ["default"]
    changes = doc["profiles"][0]["changes"]
    assert [c["via"] for c in changes if c["action"] == "found"] == ["cron"]
    assert any(c["via"] == "hermes" and "Hermes not found" in c["note"] for c in changes)


@pytest.mark.parametrize(
    "args, words",
    [
        (["install", "--via", "cron", "--at", "25:00"], "HH:MM"),
        (["install", "--via", "hermes", "--hermes", sys.executable + "-missing"], "not a file"),
        (["install", "--via", "hermes", "--hermes", "/etc/hostname"], "not a Hermes command"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(home, env, args, words):
    before = tree_digest(home)
    out = keeper(home, *args, env=env, check=False)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and words in out.stderr, out.stderr
    assert tree_digest(home) == before and not Path(env["FAKE_CRONTAB"]).exists()


def test_hermes_without_no_agent_is_refused(home, tmp_path):
    """A Hermes whose cron jobs always wake the agent would spend tokens: refused, nothing written."""
    fake = tmp_path / "old-hermes"
    (fake / "cron").mkdir(parents=True)
    (fake / "cron" / "__init__.py").write_text("")
    (fake / "cron" / "jobs.py").write_text(
        "def list_jobs(include_disabled=False):\n    return []\n\n"
        "def create_job(prompt, schedule, name=None, deliver=None, script=None):\n    raise AssertionError\n"
    )
    python = tmp_path / "python"  # Hermes's Python, as the keeper calls it: python -I hermes_side.py REQUEST
    boot = (
        f"import sys, runpy; sys.path.insert(0, {str(fake)!r}); sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -I -c "{boot}" "$2" "$3"\n')
    python.chmod(0o755)
    before = tree_digest(home)
    out = keeper(home, "install", "--via", "hermes", "--hermes", str(python), check=False)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "has no no_agent cron jobs" in out.stderr
    assert tree_digest(home) == before


# --- values that could break a crontab or a unit (issue 34) ---------------------------------

USER_TABLE = (
    b"MAILTO=me@example.org\r\n"  # a CRLF line, as an editor on another system wrote it
    b"# caf\xe9: a comment in Latin-1\n"
    b"15 * * * * printf 'page\x0cbreak\x0bend' >/dev/null\n"
    b"0 1 * * * echo \xc2\x85 \xe2\x80\xa8 \xe2\x80\xa9 \x1b[1m\x7f\n"
)


def moved(home: Path, name: str | bytes) -> Path:
    """The demo home renamed to ``name`` (a str with controls, or bytes that are not UTF-8)."""
    new = home.parent / (os.fsdecode(name) if isinstance(name, bytes) else name)
    home.rename(new)
    return new


@pytest.mark.parametrize("char", ["\r", "\x0b", "\x0c", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"])
def test_cron_refuses_a_control_character_in_the_path(home, env, char):
    """Was: a CR passed, and the next install or remove split the line at it into a cron entry
    made of the rest of the path (run every minute)."""
    root = moved(home, f"h{char}* * * * * touch INJECTED")
    table = Path(env["FAKE_CRONTAB"])
    table.write_bytes(USER_TABLE)
    for args in (["install", "--via", "cron"], ["install", "--via", "cron", "--dry-run"]):
        out = keeper(root, *args, env=env, check=False)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert "control character" in out.stderr and "nothing changed" in out.stderr
    assert table.read_bytes() == USER_TABLE


@pytest.mark.parametrize("last", [b"", b"30 2 * * * /usr/bin/true # no newline at the end"])
def test_cron_writes_the_users_lines_back_byte_for_byte(home, env, last):
    """CRLF, form feed, vertical tab, U+0085/2028/2029, ESC, DEL and Latin-1 in the user's lines
    (was: altered, or for Latin-1 an "unexpected error")."""
    table = Path(env["FAKE_CRONTAB"])
    table.write_bytes(USER_TABLE + last)
    before = USER_TABLE + (last + b"\n" if last else b"")  # cron needs the last line's newline
    keeper(home, "install", "--via", "cron", env=env)
    assert table.read_bytes().startswith(before)
    [ours] = table.read_bytes()[len(before) :].splitlines()
    assert b"# hermes-keeper:" in ours and b"--home " + os.fsencode(home) in ours
    again = keeper(home, "install", "--via", "cron", env=env)
    assert "unchanged" in again.stdout and table.read_bytes() == before + ours + b"\n"
    shown = keeper(home, "show", "--via", "cron", env=env).stdout
    assert shown.count("found") == 1 and "\r" not in shown
    keeper(home, "remove", "--via", "cron", env=env)
    assert table.read_bytes() == before


def test_cron_remove_takes_a_line_an_older_keeper_wrote_with_a_cr_whole(home, env):
    """An older keeper wrote a home with a CR into its line; cron reads it as one line, so
    ``remove`` must too (was: split at the CR, the tagged part dropped, the rest left)."""
    from hermes_keeper.schedule import Job, When
    from hermes_keeper.schedule.cron import TAG

    root = moved(home, "h\r* * * * * touch INJECTED")
    job = Job(root, "default", When(), ("/usr/local/bin/hermes-keeper",))
    old = f"30 3 * * * {shlex.join(job.argv(quiet=True))} {TAG}{job.key} default {root}\n".encode()
    table = Path(env["FAKE_CRONTAB"])
    table.write_bytes(USER_TABLE + old + b"45 4 * * * /usr/bin/true\n")
    shown = keeper(root, "show", "--via", "cron", env=env).stdout
    assert shown.count("found") == 1 and "\r" not in shown
    doc = json.loads(keeper(root, "show", "--via", "cron", "--json", env=env).stdout)
    [found] = [c for c in doc["profiles"][0]["changes"] if c["action"] == "found"]
    assert found["text"] == old.decode().rstrip("\n")  # one line, CR and all
    keeper(root, "remove", "--via", "cron", env=env)
    assert table.read_bytes() == USER_TABLE + b"45 4 * * * /usr/bin/true\n"


def test_cron_line_for_a_home_that_is_not_utf8_is_its_bytes(home, env):
    root = moved(home, b"h\xe9")
    table = Path(env["FAKE_CRONTAB"])
    table.write_bytes(USER_TABLE)
    keeper(root, "install", "--via", "cron", env=env)
    [ours] = table.read_bytes()[len(USER_TABLE) :].splitlines()
    # the path's own bytes, as cron's shell passes them (was: an "unexpected error")
    assert b"--home " + os.fsencode(shlex.quote(str(root))) + b" " in ours
    keeper(root, "remove", "--via", "cron", env=env)
    assert table.read_bytes() == USER_TABLE


UNIT_KEYS = {
    "[Unit]",
    "[Service]",
    "[Timer]",
    "[Install]",
    "Description",
    "Type",
    "ExecStart",
    "Nice",
    "IOSchedulingClass",
    "OnCalendar",
    "Persistent",
    "RandomizedDelaySec",
    "Unit",
    "WantedBy",
}


def exec_argv(service: str) -> list[str]:
    """``ExecStart=`` read back as systemd does: double quotes, ``\\\\``, ``%%``, ``$$`` and the
    C-style ``\\xNN`` / ``\\uNNNN`` escapes."""
    words = shlex.split(service.split("ExecStart=", 1)[1].split("\n", 1)[0])
    return [
        re.sub(r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})", lambda m: chr(int(m[1] or m[2], 16)), w)
        .replace("%%", "%")
        .replace("$$", "$")
        for w in words
    ]


def test_systemd_units_escape_every_control_character(home, env, tmp_path):
    """Was: a CR in the home path ended the ``Description=`` line and injected the rest as a key."""
    root = moved(home, "h\rExecStartPre=touch INJECTED\x0b\x1b\x7f\x85\u2028\u2029 50% $HOME \\")
    keeper(root, "install", "--via", "systemd", env=env)
    files = sorted((Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user").iterdir())
    for f in files:
        text = f.read_text()
        for raw in re.split(r"[\r\n\0]", text):  # systemd ends a line at CR as at LF
            assert raw == "" or raw.split("=", 1)[0] in UNIT_KEYS, (f.name, raw)
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f\x85\u2028\u2029]", text)
    argv = exec_argv(files[0].read_text())
    assert argv[1:] == ["run", "--quiet", "--home", str(root), "--profile", "default"]
    systemd_verifies(tmp_path, files)
    assert "unchanged" in keeper(root, "install", "--via", "systemd", env=env).stdout
    keeper(root, "remove", "--via", "systemd", env=env)
    assert not any(f.exists() for f in files)


def test_systemd_refuses_a_home_that_is_not_utf8(home, env):
    root = moved(home, b"h\xe9")
    out = keeper(root, "install", "--via", "systemd", env=env, check=False)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "not UTF-8" in out.stderr and "nothing changed" in out.stderr
    assert not (Path(env["XDG_CONFIG_HOME"]) / "systemd").exists()


def _fake(env, name: str, text: str) -> dict:
    """``env`` with ``name`` on PATH replaced by this shell script."""
    path = Path(env["PATH"].split(":")[0]) / name
    path.write_text(text)
    path.chmod(0o755)
    return env


REFUSING_SYSTEMCTL = (
    '#!/bin/sh\n[ "$2" = enable ] && { echo "Failed to connect to bus" >&2; exit 1; }\nexit 0\n'
)


def test_systemd_install_fails_when_systemctl_refuses(home, env):
    """Units written but the timer not enabled is a failure, said in one line, never 'installed'."""
    _fake(env, "systemctl", REFUSING_SYSTEMCTL)
    out = keeper(home, "install", "--via", "systemd", env=env, check=False)
    assert out.returncode == 2 and "installed" not in out.stdout
    assert "refused the timer (Failed to connect to bus): nothing is scheduled" in out.stderr
    assert "systemctl --user enable --now hermes-keeper-default-" in out.stderr
    assert len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize("said, words", [("no", "linger off"), ("yes", "linger on")])
def test_systemd_install_says_linger(home, env, said, words):
    _fake(env, "loginctl", f'#!/bin/sh\n[ "$1 $4" = "show-user --value" ] && echo {said}\n')
    out = keeper(home, "install", "--via", "systemd", env=env)
    assert words in out.stdout
    assert ("loginctl enable-linger" in out.stdout) == (said == "no")


SYSTEMCTL_SHOW = """#!/bin/sh
case "$3" in
  *.timer) printf 'NextElapseUSecRealtime=Mon 2026-12-07 03:30:00 UTC\\n'
           printf 'LastTriggerUSec=Sun 2026-12-06 03:41:12 UTC\\n' ;;
  *.service) printf 'Result=exit-code\\nExecMainStatus=75\\n' ;;
esac
"""


def test_show_gives_next_and_last_run(home, env):
    keeper(home, "install", "--via", "systemd", env=env)
    keeper(home, "install", "--via", "cron", env=env)
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    _fake(env, "systemctl", SYSTEMCTL_SHOW)
    out = keeper(home, "show", env=env).stdout
    assert "[Service]" not in out and "ExecStart" not in out  # no unit file: what a person asks of it
    assert (
        "systemd: next run: Mon 2026-12-07 03:30:00 UTC; last run: Sun 2026-12-06 03:41:12 UTC "
        "(exit-code, exit 75)" in out
    )
    assert re.search(r"cron: next run: \d{4}-\d\d-\d\d 03:30; last run: none recorded by the scheduler", out)
    assert re.search(
        r"default: the keeper's last recorded run: \d{4}-\d\d-\d\d \d\d:\d\d \w+, finished: pruned \d+", out
    )
    doc = json.loads(keeper(home, "show", "--json", env=env).stdout)
    row = doc["profiles"][0]
    assert row["last_recorded_run"]["kind"] == "run"
    [timer] = [c for c in row["changes"] if c["where"].endswith(".timer")]
    assert timer["runs"]["result"] == "exit-code, exit 75"
