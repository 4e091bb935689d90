"""Claiming a sweep child in the tracking store, so that no (configuration, repeat) is measured twice.

The lock in `sweep_lock` lives in this machine's spool folder: two invocations of one sweep from two
spool folders (`ROOFLINE_SPOOL_DIR`), or from two machines sharing a server, each took every child.
Where they meet is the store, so a child is claimed there, before it is measured:

1. if the store holds a FINISHED child of this sweep, env label, configuration and repeat (tag
   `sweep_child` = `<sweep_key>/r<repeat>`), it is done elsewhere; if it holds a RUNNING one of a
   live process (or of another host), it is being measured elsewhere; either way this invocation
   leaves it (a RUNNING one of a dead process of this host is ended FAILED first, as
   common.runs.close_stale_runs would);
2. otherwise this invocation creates the child run, RUNNING, with the tag set at creation (one
   request: no moment when the run exists without it), and looks again;
3. if it is then the only live claim, it measures in that run (train's `run(run_id=...)` continues
   it); if another claim appeared, it deletes its own and tries again after a random pause.

At most one invocation measures a child: each creates its claim before it looks, so of two that
overlap, the later look sees the other's claim. Two that see each other both step back and try
again at random times; one that only looks (step 1) and sees a claim leaves the child to it, and
the holder either measures it or, seeing another claim, tries again itself. No clock is compared,
so skewed clocks on two machines do not matter. Cost: two searches and one create per child.

Only online: a sweep kept offline has no store to claim in (its spool lock still guards it).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from common import schema
from common.runs import STALE_REASON, mark_failed, process_gone, process_tag
from train.sweep.spec import TAG_SWEEP_KEY, TAG_SWEEP_NAME

TAG_SWEEP_CHILD = "sweep_child"
"""`<sweep_key>/r<repeat>` on every sweep child, set when the run is created: what a claim is."""
TRIES = 6


def child_tag(sweep_key: str, repeat: int) -> str:
    return f"{sweep_key}/r{repeat}"


@dataclass
class Claim:
    """The outcome: `run_id` is this invocation's RUNNING child to measure in ("mine"), or the run
    that finished it ("finished") or holds it now ("running") elsewhere; None for "contended" (no
    claim after TRIES rounds)."""

    status: str
    run_id: str | None = None


def claim_child(
    client,
    experiment_id: str,
    sweep_name: str,
    env_label: str,
    sweep_key: str,
    repeat: int,
    run_name: str,
    tags: dict[str, str],
    *,
    tries: int = TRIES,
    pause: Callable[[float], None] = time.sleep,
) -> Claim:
    """Claim the child (`sweep_key`, `repeat`) of sweep `sweep_name` on `env_label` in
    `experiment_id` through `client` (an MlflowClient). `tags` are the new run's creation tags
    (parent, run kind, entry point, ...), to which the sweep's tags and TAG_SWEEP_CHILD are added."""
    child = child_tag(sweep_key, repeat)
    filt = (
        f"tags.{TAG_SWEEP_NAME} = {schema.filter_literal(sweep_name, 'sweep name')} and "
        f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(env_label, 'env label')} and "
        f"tags.{TAG_SWEEP_CHILD} = '{child}'"
    )
    new_tags = {
        **tags,
        TAG_SWEEP_NAME: sweep_name,
        schema.TAG_ENV_LABEL: env_label,
        TAG_SWEEP_KEY: sweep_key,
        TAG_SWEEP_CHILD: child,
        schema.TAG_HOST: schema.host_name(),
        schema.TAG_PROCESS: process_tag(),
    }
    for attempt in range(tries):
        held = _holder(client, experiment_id, filt, mine=None)
        if held is not None:
            return held
        run_id = client.create_run(experiment_id, run_name=run_name, tags=new_tags).info.run_id
        other = _holder(client, experiment_id, filt, mine=run_id)
        if other is None:
            return Claim("mine", run_id)
        client.delete_run(run_id)
        if other.status == "finished":
            return other
        pause((0.2 + random.random()) * (attempt + 1))
    return Claim("contended")


def _holder(client, experiment_id: str, filt: str, mine: str | None) -> Claim | None:
    """The claim on the child other than `mine`: a FINISHED run first, else a RUNNING run of a live
    process (a RUNNING one of a dead process of this host is ended FAILED here), else None."""
    runs = [
        r
        for r in client.search_runs([experiment_id], filt, max_results=100)
        if r.info.run_id != mine
    ]
    done = [r for r in runs if r.info.status == "FINISHED"]
    if done:
        return Claim("finished", done[0].info.run_id)
    host = schema.host_name() + ":"
    for r in runs:
        if r.info.status != "RUNNING":
            continue
        proc = r.data.tags.get(schema.TAG_PROCESS, "")
        if proc.startswith(host) and process_gone(proc):
            mark_failed(r.info.run_id, STALE_REASON, client)
            continue
        return Claim("running", r.info.run_id)
    return None
