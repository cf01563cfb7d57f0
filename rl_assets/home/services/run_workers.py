"""Where a home's run workers are recorded, so ``rl-assets stop`` ends them.

A run worker leads a session of its own (so a run outlives the driver or
daemon that launched it), which puts it outside every service's session.
Each worker records its ``pid@start-time`` in the home's ``services/workers/``
while it runs (:mod:`rl_assets.instance.run_worker`), and :func:`end_run_workers`
ends the sessions of those still alive, sandboxes included.
"""

from __future__ import annotations

from pathlib import Path

from rl_assets.home.layout import Home, ensure_private_dir
from rl_assets.home.services.processes import Session, identity_alive


def worker_file(home: Home, run_id: str) -> Path:
    """Where the worker of ``run_id`` records its identity while it runs."""
    return ensure_private_dir(home.services / "workers") / run_id


def end_run_workers(home: Home) -> int:
    """End every live run worker of the home with its whole session; the number ended."""
    folder = home.services / "workers"
    identities = [p.read_text() for p in folder.iterdir()] if folder.is_dir() else []
    live = [i for i in identities if i and identity_alive(i)]
    for identity in live:
        pid, _, started = identity.partition("@")
        Session(sid=int(pid), leader_started=int(started)).end()
    return len(live)
