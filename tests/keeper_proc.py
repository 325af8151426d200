"""The keeper as a process of its own, as cron runs it, and what a test reads back afterwards."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys


def keeper_cmd(home, *args) -> list[str]:
    return [sys.executable, "-m", "hermes_keeper", *args, "--home", str(home)]


def session_ids(db) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def planned_prune(home) -> set[str]:
    """The sessions ``plan`` says a run would prune."""
    out = subprocess.run(keeper_cmd(home, "plan", "--json", "-v"), capture_output=True, text=True, check=True)
    plan = json.loads(out.stdout)["profiles"][0]
    return {d["session_id"] for d in plan["decisions"] if d["action"] == "prune"}
