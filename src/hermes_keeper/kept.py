"""Sessions the keeper itself keeps for a while: those ``archive restore`` brought back.

A restored session is old by definition, so without this the next night's run would prune it
again, silently. ``keeper/kept.json`` maps session id -> until (unix time); expired entries are
dropped whenever it is written. Ids and times only, never content; 0600 through the door.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable

from hermes_keeper.fs import durable_rename, open_private, private_dir
from hermes_keeper.place import Place

KEPT_NAME = "kept.json"


class KeptUnreadable(Exception):
    """kept.json exists but is not what the keeper writes: the survey keeps everything."""


def read_kept(profile: Place) -> dict[str, float]:
    """Session id -> until. Empty when there is none; :class:`KeptUnreadable` when damaged."""
    data = profile.fs.read_bytes("keeper", KEPT_NAME)
    if data is None:
        return {}
    try:
        kept = json.loads(data)
    except ValueError:
        raise KeptUnreadable(f"keeper/{KEPT_NAME} is not JSON") from None
    if not isinstance(kept, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and math.isfinite(v) for k, v in kept.items()
    ):
        raise KeptUnreadable(f"keeper/{KEPT_NAME} is not a map of session id to time")
    return {k: float(v) for k, v in kept.items()}


def keep_sessions(profile: Place, ids: Iterable[str], until: float, now: float) -> None:
    """Keep ``ids`` until ``until`` (a later date already set wins); written durably."""
    try:
        kept = {k: v for k, v in read_kept(profile).items() if v > now}
    except KeptUnreadable:
        kept = {}  # what the keeper wrote is gone anyway; start again rather than fail the restore
    for sid in ids:
        kept[sid] = max(until, kept.get(sid, 0.0))
    folder = private_dir(profile.keeper_dir)
    tmp = folder / (KEPT_NAME + ".tmp")
    fd = open_private(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, json.dumps(kept, sort_keys=True).encode())
    finally:
        os.close(fd)
    durable_rename(tmp, folder / KEPT_NAME)
