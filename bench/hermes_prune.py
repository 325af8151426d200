"""Hermes's own maintenance, timed: ``prune_sessions(older_than_days)`` then ``vacuum()``.

Runs under the Python of a hermes-agent virtualenv; prints JSON.
"""

import json
import sys
import time
from pathlib import Path

import hermes_state

home, days = Path(sys.argv[1]), float(sys.argv[2])
db = hermes_state.SessionDB(home / "state.db")
t0 = time.perf_counter()
pruned = db.prune_sessions(older_than_days=days, sessions_dir=home / "sessions")
t1 = time.perf_counter()
db.vacuum()
t2 = time.perf_counter()
db.close()
print(json.dumps({"pruned": pruned, "prune_s": t1 - t0, "vacuum_s": t2 - t1}))
