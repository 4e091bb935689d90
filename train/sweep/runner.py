"""Running a sweep: one parent run, one child `train` run per (configuration, repeat) still to do,
every failure isolated in its child. See docs/sweep.md."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from common import console, schema
from common.errors import one_line
from common.run_record import context_tags
from common.runs import mlflow_client, redirect_run
from common.server import is_unreachable
from common.tracking import RunSession
from common.ui import say_links
from train.config import TrainConfig
from train.run import Measure, RunOptions, SweepChild
from train.run import run as run_train
from train.sweep.claims import TAG_SWEEP_CHILD, Claim, child_tag, claim_child
from train.sweep.spec import (
    PARAM_REPEAT,
    TAG_RESUME_OF,
    TAG_SWEEP_KEY,
    TAG_SWEEP_NAME,
    Plan,
    SweepSpec,
    plan_sweep,
)
from train.sweep.state import SweepState, reconcile, save_ledger, sweep_lock
from train.sweep.outcomes import (
    ChildOutcome,
    all_failed,
    parent_metrics,
    parent_note,
    summary_csv,
)


@dataclass
class Hooks:
    """What a caller built on the sweep adds to it (train/whatif: a what-if's counterfactuals)."""

    measure: Measure | None = None
    """makes each child's BenchResult (train.run.run's `measure`); None: the real benchmark"""
    skip: Callable[[TrainConfig, int, str], str | None] | None = None
    """asked right before each child still to do (configuration, repeat, sweep_key): a reason
    leaves it unrun this time (status NOT_RUN, the reason as its error; a later invocation may
    run it)"""
    parent_tags: dict = field(default_factory=dict)
    """more tags for the parent run (`mlflow.parentRunId`: nested under the caller's run)"""


def run_sweep(
    spec: SweepSpec,
    *,
    experiment: str | None = None,
    env_label: str | None = None,
    progress: bool = True,
    system_metrics: bool = True,
    on_child_done: Callable[[ChildOutcome], None] | None = None,
    hooks: Hooks | None = None,
) -> list[ChildOutcome]:
    """Run (or resume) the sweep; returns one outcome per planned (configuration, repeat), in plan
    order. Bad input (a model name, a configuration, another matrix under this name) raises
    UsageError before anything runs; the same sweep already running on this machine, BenchError."""
    plan = plan_sweep(spec, env_label)
    console.info(
        f"sweep {spec.name} on {plan.env_label}: {plan.n_configs} configuration(s) x "
        f"{spec.repeats} repeat(s)"
    )
    with sweep_lock(spec.name, plan.env_label):
        return _run(plan, experiment, progress, system_metrics, on_child_done, hooks or Hooks())


def _run(
    plan: Plan, experiment, progress: bool, system_metrics: bool, on_child_done, hooks: Hooks
) -> list[ChildOutcome]:
    spec = plan.spec
    state = reconcile(spec, plan.env_label, experiment)
    outcomes = _done_before(plan, state)
    todo = [(cfg, r, key) for cfg, r, key in plan.runs if (key, r) not in state.done]
    if outcomes:
        _say_resuming(plan, state, len(outcomes), len(todo))

    tags = {
        TAG_SWEEP_NAME: spec.name,
        schema.TAG_ENV_LABEL: plan.env_label,
        schema.TAG_HOST: schema.host_name(),
        **hooks.parent_tags,
    }
    _point_mlflow_run_to_parent(plan, state, tags)
    parent = RunSession(
        "sweep",
        experiment=experiment,
        run_name=spec.name,
        run_id=state.parent_run_id,
        tags=tags,
        offline=not state.reachable,
        local_id=None if state.reachable else state.parent_local_id,
    )
    t0 = time.perf_counter()
    with parent:
        parent.log_params({**spec.run_params(), "sweep_configs": plan.n_configs})
        parent.flush()
        bar = _bar(len(todo), progress)
        try:
            for cfg, r, key in todo:
                label = plan.label(cfg, r)
                bar.set_description_str(label)
                why = hooks.skip(cfg, r, key) if hooks.skip is not None else None
                if why:
                    outcome = ChildOutcome(label, cfg.config_key(), key, r, "NOT_RUN", error=why)
                else:
                    outcome = _run_child(
                        plan, cfg, r, key, label, experiment, parent, system_metrics, hooks.measure
                    )
                outcomes.append(outcome)
                if outcome.status in ("FINISHED", "SKIPPED"):  # SKIPPED: finished elsewhere
                    state.done.add((key, r))
                    save_ledger(spec.name, plan.env_label, state)
                bar.update(1)
                if outcome.status == "FAILED":
                    bar.write(f"FAILED {outcome.label}: {outcome.error}")
                if on_child_done is not None:
                    on_child_done(outcome)
        finally:
            bar.close()
            _settle_elsewhere(outcomes, parent)
            _summarize(parent, plan, outcomes, time.perf_counter() - t0)
    if not parent.offline:
        say_links("sweep", parent.run_id, parent.experiment_id)
    return outcomes


def _done_before(plan: Plan, state: SweepState) -> list[ChildOutcome]:
    """What earlier invocations finished: SKIPPED outcomes with their runs and numbers."""
    outcomes = [
        ChildOutcome(plan.label(cfg, r), cfg.config_key(), key, r, "SKIPPED")
        for cfg, r, key in plan.runs
        if (key, r) in state.done
    ]
    for o in outcomes:
        for name, value in state.earlier.get((o.sweep_key, o.repeat), {}).items():
            setattr(o, name, value)
    return outcomes


def _summarize(parent, plan: Plan, outcomes: list[ChildOutcome], wall_s: float) -> None:
    """The parent's counts, summary.csv and description (outcomes sorted into plan order); the
    parent ends FAILED when every run failed."""
    spec = plan.spec
    parent.log_metrics(parent_metrics(outcomes, len(plan.runs)))
    order = {(key, r): i for i, (_, r, key) in enumerate(plan.runs)}
    outcomes.sort(key=lambda o: order[(o.sweep_key, o.repeat)])
    parent.log_text("sweep/summary.csv", summary_csv(outcomes))
    parent.set_note(
        parent_note(spec.name, plan.env_label, spec.matrix, spec.repeats, outcomes, wall_s)
    )
    if all_failed(outcomes):
        parent.fail(f"all {len(outcomes)} run(s) failed; first: {outcomes[0].error}")


def _say_resuming(plan: Plan, state: SweepState, n_done: int, n_todo: int) -> None:
    notes = [f"{len(state.spooled)} kept offline"] if state.spooled else []
    if state.remembered:
        notes.append(f"{len(state.remembered)} known from this machine's ledger")
    console.info(
        f"resuming sweep {plan.spec.name}: {n_done} of {len(plan.runs)} run(s) already finished"
        + (f" ({', '.join(notes)})" if notes else "")
        + f", {n_todo} to go"
    )


def _point_mlflow_run_to_parent(plan: Plan, state: SweepState, tags: dict) -> None:
    """`mlflow run` made a new run for this invocation, but the sweep already has its parent: say
    so in that run (nested under the parent) instead of leaving it empty."""
    env_run = os.environ.get("MLFLOW_RUN_ID")
    parent_id = state.parent_run_id
    if not (env_run and state.reachable and parent_id and env_run != parent_id):
        return
    del os.environ["MLFLOW_RUN_ID"]
    redirect_run(
        env_run,
        parent_id,
        {schema.TAG_RUN_KIND: "sweep", **tags, TAG_RESUME_OF: parent_id},
        f"Resumed sweep {plan.spec.name} ({plan.env_label}): its children and summary are in run "
        f"{parent_id}.",
    )


def _run_child(
    plan: Plan,
    cfg: TrainConfig,
    repeat: int,
    key: str,
    label: str,
    experiment,
    parent,
    system_metrics: bool = True,
    measure: Measure | None = None,
) -> ChildOutcome:
    """One child run (`label`: plan.label's). Any exception (not an interrupt) becomes a FAILED
    child with its one-line reason."""
    n_before = len(parent.children)
    extra_tags = {
        TAG_SWEEP_NAME: plan.spec.name,
        TAG_SWEEP_KEY: key,
        TAG_SWEEP_CHILD: child_tag(key, repeat),
    }
    claim = _claim(plan, cfg, repeat, key, parent)
    if claim is not None and claim.status != "mine":
        return _elsewhere(label, cfg, key, repeat, claim)
    claimed = claim.run_id if claim is not None else None
    child = SweepChild(
        parent,
        params={PARAM_REPEAT: repeat},
        tags=extra_tags,
        repeat=repeat,
        note=f"Repeat {repeat} of sweep {plan.spec.name} ({plan.env_label}).",
        run_id=claimed,
    )
    try:
        with console.quiet():
            session, result = run_train(
                cfg,
                RunOptions(experiment, progress=False, system_metrics=system_metrics),
                child,
                measure,
            )
    except Exception as exc:  # noqa: BLE001 - isolation is the point; KeyboardInterrupt still stops the sweep
        reason = one_line(exc)
        recorded = [c for c in parent.children[n_before:] if c.status == "FAILED"]
        run_id = (
            recorded[0].run_id
            if recorded
            else _record_failed_child(cfg, repeat, extra_tags, experiment, parent, reason, claimed)
        )
        return ChildOutcome(label, cfg.config_key(), key, repeat, "FAILED", run_id, error=reason)
    status = "OFFLINE" if session.offline else "FINISHED"
    m = result.metrics
    return ChildOutcome(
        label,
        session.record.tags[schema.TAG_CONFIG_KEY],  # the run's, as its header logged it
        key,
        repeat,
        status,
        session.run_id,
        m["throughput_samples_per_s"],
        m["step_time_mean_s"],
    )


def _record_failed_child(
    cfg: TrainConfig,
    repeat: int,
    extra_tags: dict,
    experiment,
    parent,
    reason: str,
    run_id: str | None = None,
) -> str | None:
    """A FAILED child for a failure that left no run behind (a configuration rejected before its run
    opened: fp16 on CPU, a missing device, ...), in the run the sweep claimed for it if any."""
    session = RunSession(
        "train",
        experiment=experiment,
        run_name=cfg.run_name(cfg.device, repeat),
        parent=parent,
        run_id=run_id,
        tags={
            schema.TAG_ENV_LABEL: cfg.env_label,
            schema.TAG_HOST: schema.host_name(),
            schema.TAG_DEVICE_TYPE: cfg.device,
            schema.TAG_CONFIG_KEY: cfg.config_key(),
            schema.TAG_CONFIG_LABEL: cfg.config_label(),
            **extra_tags,
        },
    )
    try:
        with console.quiet(), session:
            session.log_params({**cfg.params(), PARAM_REPEAT: repeat})
            session.set_note(f"FAILED before measuring: {reason}")
            session.fail(reason)
    except Exception as exc:  # noqa: BLE001 - the outcome still says FAILED with the reason
        console.warn(f"could not record the failed run ({one_line(exc)[:200]})")
    return session.run_id


def _claim(plan: Plan, cfg: TrainConfig, repeat: int, key: str, parent) -> Claim | None:
    """Claim the child in the store (train/sweep/claims.py); None when offline, or when the store
    could not be asked (then the child is measured unclaimed, with a warning)."""
    if parent.offline or not parent.run_id or not parent.experiment_id:
        return None
    tags = {
        **context_tags("train"),
        schema.TAG_RUN_KIND: "train",
        schema.TAG_ENTRY_POINT: parent.record.tags.get(schema.TAG_ENTRY_POINT, "sweep"),
        "mlflow.parentRunId": parent.run_id,
    }
    try:
        return claim_child(
            mlflow_client(),
            parent.experiment_id,
            plan.spec.name,
            plan.env_label,
            key,
            repeat,
            cfg.run_name(cfg.device, repeat),
            tags,
        )
    except Exception as exc:  # noqa: BLE001 - measuring unclaimed beats not measuring
        if not is_unreachable(exc):
            console.warn(
                f"could not claim {plan.label(cfg, repeat)} in the store ({one_line(exc)[:160]}); "
                "measuring it unclaimed"
            )
        return None


def _elsewhere(label: str, cfg: TrainConfig, key: str, repeat: int, claim: Claim) -> ChildOutcome:
    """The outcome of a child another invocation finished (SKIPPED, with its run's numbers) or
    measures now (ELSEWHERE)."""
    if claim.status == "finished":
        m = mlflow_client().get_run(claim.run_id).data.metrics
        return ChildOutcome(
            label,
            cfg.config_key(),
            key,
            repeat,
            "SKIPPED",
            claim.run_id,
            m.get("throughput_samples_per_s"),
            m.get("step_time_mean_s"),
        )
    why = (
        f"being measured by another invocation of this sweep (run {claim.run_id})"
        if claim.run_id
        else "other invocations of this sweep kept claiming it at the same moment"
    )
    return ChildOutcome(label, cfg.config_key(), key, repeat, "ELSEWHERE", claim.run_id, error=why)


def _settle_elsewhere(outcomes: list[ChildOutcome], parent) -> None:
    """Children another invocation was measuring when this one passed them: those FINISHED by now
    become SKIPPED with that run's numbers, so the summary of the invocation that ends last covers
    them. Never raises (a store gone now leaves them ELSEWHERE)."""
    pending = [o for o in outcomes if o.status == "ELSEWHERE" and o.run_id]
    if not pending or parent.offline:
        return
    try:
        client = mlflow_client()
        for o in pending:
            run = client.get_run(o.run_id)
            if run.info.status == "FINISHED":
                m = run.data.metrics
                o.status, o.error = "SKIPPED", None
                o.throughput_samples_per_s = m.get("throughput_samples_per_s")
                o.step_time_mean_s = m.get("step_time_mean_s")
    except Exception as exc:  # noqa: BLE001 - the summary then says ELSEWHERE, which was true
        console.note(
            f"could not look at the runs other invocations measured ({one_line(exc)[:120]})"
        )


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="run",
        disable=not enabled,
        dynamic_ncols=True,
        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} runs [{elapsed}<{remaining}]",
    )
