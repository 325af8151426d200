"""The routes a multiplexed gateway keeps for a profile in another home's store.

With ``gateway.multiplex_profiles`` (the default of today's Hermes; its explicit ``false`` is
retired) one gateway process serves every profile, and its routing index for all of them lives in
the *launch home's* store (``gateway/session_persistence.py`` ``_routing_db``): the
``gateway_routing`` table of ``<launch home>/state.db`` and the ``sessions/sessions.json`` mirror
beside it, while each session's rows live in its own profile's ``state.db``. A key
``agent:<namespace>:...`` names the profile that owns the session (:func:`profile_of_key`).

The launch home is the default root, or a named profile that started the host (multiplexing means
"the one host process, whichever profile started it"), and whether a host multiplexes is settled
by the gateway at boot, not by the config file alone. So the keeper does not guess: for each
profile it reads the routing of the root and of every sibling profile, and a route whose key names
this profile protects its session exactly as the profile's own routing does. Such routes can only
exist where a multiplexer wrote them; a home with none adds nothing. Read-only, and only the
routing (never a message).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import read_regular
from hermes_keeper.model.gateway import profile_of_key
from hermes_keeper.place import Place
from hermes_keeper.sqlite.connect import connect_ro


def launch_homes(place: Place) -> list[Path]:
    """Every other home under ``place``'s root that could have launched its gateway: the root and
    each profile folder (not one reached through a symlink: another tree, not this root's)."""
    homes = [place.root]
    profiles = place.root / "profiles"
    if profiles.is_dir() and not profiles.is_symlink():
        homes += sorted(p for p in profiles.iterdir() if p.is_dir() and not p.is_symlink())
    return [h for h in homes if h != place.home]


def _session_id(raw) -> str | None:
    try:
        entry = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    sid = entry.get("session_id") if isinstance(entry, dict) else None
    return sid if isinstance(sid, str) else None


def _named(key, profile: str) -> bool:
    return isinstance(key, str) and profile_of_key(key) == profile


def routes_in_db(db: Path, profile: str) -> set[str]:
    """Session ids ``db``'s ``gateway_routing`` routes to under keys naming ``profile``."""
    conn = connect_ro(db)
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(gateway_routing)")}
        if not {"session_key", "entry_json"} <= columns:
            return set()
        rows = conn.execute("SELECT session_key, entry_json FROM gateway_routing").fetchall()
    finally:
        conn.close()
    return {sid for key, raw in rows if _named(key, profile) and (sid := _session_id(raw))}


def routes_in_mirror(path: Path, profile: str) -> set[str]:
    """Session ids a ``sessions.json`` mirror routes to under keys naming ``profile`` (no file:
    none); a file that is not the mirror's shape raises :class:`ValueError`."""
    try:
        raw = read_regular(path, follow=False)  # a FIFO, a device, a link: refused, never waited on
    except FileNotFoundError:
        return set()
    except KeeperError as exc:
        raise ValueError(str(exc)) from None
    data = json.loads(raw.decode("utf-8-sig"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return {sid for key, entry in data.items() if _named(key, profile) and (sid := _session_id(entry))}


def launch_home_routes(place: Place) -> tuple[set[str], list[str]]:
    """The session ids other homes' routing names for ``place``'s profile, and the routing that
    could not be read (each one line: the caller keeps what the gateway could route to)."""
    ids: set[str] = set()
    problems: list[str] = []
    for home in launch_homes(place):
        db, mirror = home / "state.db", home / "sessions" / "sessions.json"
        try:
            if db.is_file():
                ids |= routes_in_db(db, place.name)
        except sqlite3.Error as exc:
            problems.append(f"{db} routing unreadable ({exc})")
        try:
            ids |= routes_in_mirror(mirror, place.name)
        except (OSError, ValueError) as exc:
            problems.append(f"{mirror} unreadable ({type(exc).__name__})")
    return ids, problems
