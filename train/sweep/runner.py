"""Running a sweep: one parent run, one child `train` run per (configuration, repeat) still to do,
every failure isolated in its child. See docs/sweep.md."""

from __future__ import annotations

import os
import time
from typing import Callable

from common import console, schema
from common.errors import one_line
from train.config import TrainConfig
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
from train.sweep.summary import (
    ChildOutcome,
    all_failed,
    parent_metrics,
    parent_note,
    summary_csv,
)


def run_sweep(
    spec: SweepSpec,
    *,
    experiment: str | None = None,
    env_label: str | None = None,
    progress: bool = True,
    system_metrics: bool = True,
    on_child_done: Callable[[ChildOutcome], None] | None = None,
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
        return _run(plan, experiment, progress, system_metrics, on_child_done)


def _run(
    plan: Plan, experiment, progress: bool, system_metrics: bool, on_child_done
) -> list[ChildOutcome]:
    from common.tracking import RunSession

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
                bar.set_description_str(plan.label(cfg, r))
                outcome = _run_child(plan, cfg, r, key, experiment, parent, system_metrics)
                outcomes.append(outcome)
                if outcome.status == "FINISHED":
                    state.done.add((key, r))
                    save_ledger(spec.name, plan.env_label, state)
                bar.update(1)
                if outcome.status == "FAILED":
                    bar.write(f"FAILED {outcome.label}: {outcome.error}")
                if on_child_done is not None:
                    on_child_done(outcome)
        finally:
            bar.close()
            _summarize(parent, plan, outcomes, time.perf_counter() - t0)
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
    from common.runs import redirect_run

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


def repeat_suffix(repeat: int) -> str:
    """What ends a sweep child's run name: `-r<repeat>` (the `repeat` param, from 0), so that the
    repeats of one configuration have distinct names."""
    return f"-r{repeat}"


def _run_child(
    plan: Plan,
    cfg: TrainConfig,
    repeat: int,
    key: str,
    experiment,
    parent,
    system_metrics: bool = True,
) -> ChildOutcome:
    """One child run. Any exception (not an interrupt) becomes a FAILED child with its one-line reason."""
    from train.run import RunOptions, SweepChild, run as run_train

    label = plan.label(cfg, repeat)
    n_before = len(parent.children)
    extra_tags = {TAG_SWEEP_NAME: plan.spec.name, TAG_SWEEP_KEY: key}
    child = SweepChild(
        parent,
        params={PARAM_REPEAT: repeat},
        tags=extra_tags,
        name_suffix=repeat_suffix(repeat),
        note=f"Repeat {repeat} of sweep {plan.spec.name} ({plan.env_label}).",
    )
    try:
        with console.quiet():
            session, result = run_train(
                cfg, RunOptions(experiment, progress=False, system_metrics=system_metrics), child
            )
    except Exception as exc:  # noqa: BLE001 - isolation is the point; KeyboardInterrupt still stops the sweep
        reason = one_line(exc)
        recorded = [c for c in parent.children[n_before:] if c.status == "FAILED"]
        run_id = (
            recorded[0].run_id
            if recorded
            else _record_failed_child(cfg, repeat, extra_tags, experiment, parent, reason)
        )
        return ChildOutcome(label, cfg.config_key(), key, repeat, "FAILED", run_id, error=reason)
    status = "OFFLINE" if session.offline else "FINISHED"
    m = result.metrics
    return ChildOutcome(
        label,
        cfg.config_key(),
        key,
        repeat,
        status,
        session.run_id,
        m["throughput_samples_per_s"],
        m["step_time_mean_s"],
    )


def _record_failed_child(
    cfg: TrainConfig, repeat: int, extra_tags: dict, experiment, parent, reason: str
) -> str | None:
    """A FAILED child for a failure that left no run behind (a configuration rejected before its run
    opened: fp16 on CPU, a missing device, ...)."""
    from common.tracking import RunSession

    session = RunSession(
        "train",
        experiment=experiment,
        run_name=f"{cfg.run_name()}-{cfg.device}{repeat_suffix(repeat)}",
        parent=parent,
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


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="run",
        disable=not enabled,
        dynamic_ncols=True,
        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} runs [{elapsed}<{remaining}]",
    )
