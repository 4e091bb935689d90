"""Sweep children claimed in the store (issue 25, train/sweep/claims.py).

On main, the same sweep started at once from two spool folders (ROOFLINE_SPOOL_DIR) against one store
measured every child twice: the lock lived in the spool folder, not where the runs meet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import mlflow

from common import schema
from tests.conftest import ROOT
from tests.helpers import dead_pid

SWEEP = ["--models", "resnet18", "--batch-sizes", "2", "3", "4", "--image-size", "32"]
SWEEP += ["--warmup-iters", "1", "--iters", "2", "--device", "cpu", "--env-label", "box"]
SWEEP += ["--no-progress", "--name", "shared", "--experiment", "claims"]


def test_one_sweep_from_two_spool_folders_measures_each_child_once(tracking, tmp_path):
    mlflow.tracking.MlflowClient().create_experiment("claims")  # one experiment, made once
    procs = []
    for folder in ("spool-a", "spool-b"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFLINE_SPOOL_DIR=str(tmp_path / folder))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "train.sweep", *SWEEP],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = mlflow.search_runs(experiment_names=["claims"], output_format="list")
    train = [r for r in runs if r.data.tags[schema.TAG_RUN_KIND] == "train"]
    finished = Counter(
        (r.data.tags["sweep_key"], r.data.params["repeat"])
        for r in train
        if r.info.status == "FINISHED"
    )
    assert len(finished) == 3 and set(finished.values()) == {1}, outputs
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    # each invocation's summary accounts for every child: measured there, skipped as FINISHED by
    # the other (before this one reached it, or by its end), or still being measured by the other
    for out in outputs:
        m = re.search(
            r"(\d+) finished, (\d+) skipped \(done before\), 0 failed, 0 kept offline"
            r"(?:, (\d+) measured by another invocation)?",
            out,
        )
        assert m and sum(int(g or 0) for g in m.groups()) == 3, out


# ------------------------------------------------------------------ the protocol, one store
def _claim(client, exp_id, **kw):
    from train.sweep.claims import claim_child

    return claim_child(
        client, exp_id, "s", "box", "k1", 0, "child-r0", {schema.TAG_RUN_KIND: "train"}, **kw
    )


def _holder(client, exp_id, status, process, create=None):
    run = (create or client.create_run)(
        exp_id,
        tags={
            schema.TAG_RUN_KIND: "train",
            "sweep_name": "s",
            schema.TAG_ENV_LABEL: "box",
            "sweep_child": "k1/r0",
            schema.TAG_PROCESS: process,
        },
    )
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_a_child_finished_elsewhere_is_not_claimed(tracking):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("c1")
    done = _holder(client, exp, "FINISHED", "other-box:1:0")
    claim = _claim(client, exp)
    assert (claim.status, claim.run_id) == ("finished", done)
    assert len(client.search_runs([exp])) == 1


def test_a_child_another_host_measures_is_left_to_it(tracking):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("c2")
    other = _holder(client, exp, "RUNNING", "other-box:1:0")
    assert (_claim(client, exp).status, _claim(client, exp).run_id) == ("running", other)


def test_a_claim_of_a_dead_process_of_this_host_is_ended_and_taken(tracking):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("c3")
    dead = _holder(client, exp, "RUNNING", f"{schema.host_name()}:{dead_pid()}:0")
    claim = _claim(client, exp)
    assert claim.status == "mine" and claim.run_id != dead
    assert client.get_run(dead).info.status == "FAILED"
    mine = client.get_run(claim.run_id)
    assert mine.info.status == "RUNNING" and mine.data.tags["sweep_child"] == "k1/r0"


def test_two_claims_at_the_same_moment_step_back_and_one_wins(tracking):
    """Another invocation creates its claim between this one's create and its second look: this one
    deletes its claim; on its next round the other's claim holds the child."""
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("c4")
    real_create = client.create_run
    made = []

    def create_beside_another(*a, **k):
        run = real_create(*a, **k)
        if not made:
            made.append(_holder(client, exp, "RUNNING", "other-box:1:0", create=real_create))
        return run

    client.create_run = create_beside_another
    pauses = []
    claim = _claim(client, exp, pause=pauses.append)
    assert (claim.status, claim.run_id) == ("running", made[0]) and len(pauses) == 1
    assert [r.info.run_id for r in client.search_runs([exp])] == made  # this one's claim deleted
