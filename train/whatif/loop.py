"""The what-if loop: read the original, predict every move, log the predictions (first), run the
counterfactuals through the sweep engine, score each prediction against its measurement, log the
checks. `run_whatif` is what `python -m train.whatif` calls; tests pass a stand-in `measure`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from common import console, schema
from common.envinfo import device_name as local_device_name
from common.errors import BenchError, UsageError
from common.runs import mlflow_client, redirect_run
from common.tracking import RunSession
from roofline.scoring import Measured, verdict
from roofline.whatif import predict
from train import device as dev
from train.run import Measure
from train.sweep.runner import Hooks, run_sweep
from train.sweep.spec import plan_sweep
from train.sweep.state import existing_state
from train.sweep.outcomes import ChildOutcome
from train.whatif import measured as meas
from train.whatif import plan as planning
from train.whatif import runlog, source

DONE = ("FINISHED", "SKIPPED")
"""outcomes whose run measured (now, or in an earlier invocation)"""


@dataclass
class Request:
    """What the user asked of one what-if."""

    run_id: str
    repeats: int = 3
    moves: list[str] = field(default_factory=list)
    budget_s: float = 0.0
    experiment: str | None = None
    progress: bool = True


@dataclass
class Outcome:
    """What a what-if ended with."""

    run_id: str | None
    rows: list[dict]
    no_move: list[str]
    left_out: list[str]
    session: RunSession


def check_device(src: source.Source):
    """The device the original ran on, here; refused in one line when this machine has another."""
    try:
        device = dev.resolve_device(src.cfg.device)
    except BenchError as exc:
        raise UsageError(
            f"run {src.run_id} ran on {src.device_name} ({src.cfg.device}), which this machine "
            f"does not have ({exc}): run the what-if where the run was made"
        ) from None
    here = local_device_name(str(device))
    if src.device_name and here != src.device_name:
        raise UsageError(
            f"run {src.run_id} ran on {src.device_name}; this machine's {device.type} is {here}: "
            "run the what-if on the machine (and device) the run was made on"
        )
    return device


def run_whatif(req: Request, measure: Measure | None = None) -> Outcome:
    """The whole loop (module doc). Bad input is one UsageError before anything is logged."""
    t0 = time.perf_counter()
    client = mlflow_client()
    src = source.read(req.run_id, client)
    device = check_device(src)
    moves, no_move = planning.choose(src.original, device, req.moves)
    spec = planning.spec(src.cfg, moves, req.repeats, src.run_id)
    sweep_plan = plan_sweep(spec)
    experiment = req.experiment or client.get_experiment(src.experiment_id).name
    exp_id = client.get_experiment_by_name(experiment)
    earlier = (
        runlog.find(client, exp_id.experiment_id, spec.name, src.cfg.env_label) if exp_id else None
    )
    logged = runlog.read_predictions(client, earlier) if earlier is not None else None
    session = _session(src, spec.name, experiment, earlier)
    budget = planning.Budget(
        req.budget_s, planning.rows(sweep_plan, moves), src.duration_s or planning.DEFAULT_RUN_S, t0
    )
    by_name = {m.name: m for m in moves}
    with session:
        if logged is None:
            preds = [
                predict(m, src.rows, src.original, src.roof, src.fit, src.no_rows_why)
                for m in moves
            ]
            logged = runlog.log_predictions(session, src, preds, no_move, _load("start"))
        else:
            console.info(f"resuming what-if run {session.run_id}: its logged predictions stand")
        _say_predictions(logged)
        left_out = budget.fit(_todo(sweep_plan, experiment), by_name)
        for line in left_out:
            console.warn(line)
        hooks = Hooks(
            measure=measure,
            skip=lambda cfg, r, key: budget.skip(key, by_name.get(budget.row_of.get(key, ""))),
            parent_tags={"mlflow.parentRunId": session.run_id} if session.run_id else {},
        )
        outcomes = run_sweep(
            spec,
            experiment=experiment,
            progress=req.progress,
            on_child_done=lambda o: budget.ran(),
            hooks=hooks,
        )
        rows = checks(logged, outcomes, budget.row_of, client, src.cfg.batch_size)
        session.log_metrics(_load("end"))
        head = f"What-if of {src.cfg.config_label()} on {src.device_name} (run {src.run_id})"
        runlog.log_checks(session, rows, runlog.note(head, rows, logged.get("no_move", [])))
    return Outcome(session.run_id, rows, logged.get("no_move", []), left_out, session)


def _session(src: source.Source, sweep_name: str, experiment: str, earlier) -> RunSession:
    """The what-if run: a new one, or the earlier invocation's (continued; a run `mlflow run`
    made meanwhile points to it)."""
    tags = {
        schema.TAG_ENV_LABEL: src.cfg.env_label,
        schema.TAG_DEVICE_NAME: src.device_name,
        schema.TAG_DEVICE_TYPE: src.original.device_type,
        schema.TAG_HOST: schema.host_name(),
        schema.TAG_CONFIG_KEY: src.cfg.config_key(),
        schema.TAG_CONFIG_LABEL: src.cfg.config_label(),
        runlog.TAG_OF: src.run_id,
        runlog.TAG_SWEEP: sweep_name,
        runlog.TAG_BREAKDOWN: src.breakdown_run or "none",
        runlog.TAG_ROOF: "; ".join(sorted(set(src.roof.sources.values()))) if src.roof else "none",
    }
    earlier_id = earlier.info.run_id if earlier is not None else None
    env_run = os.environ.get("MLFLOW_RUN_ID")
    if earlier_id and env_run:  # the earlier run goes on; the sweep's parent must not take this one
        del os.environ["MLFLOW_RUN_ID"]
    if earlier_id and env_run and env_run != earlier_id:
        redirect_run(
            env_run,
            earlier_id,
            {schema.TAG_RUN_KIND: "whatif", **tags},
            f"Resumed what-if of run {src.run_id}: its predictions and checks are in run {earlier_id}.",
        )
    session = RunSession(
        "whatif",
        experiment=experiment,
        run_name=src.cfg.run_name(src.original.device_type, kind="whatif"),
        tags=tags,
        run_id=earlier_id,
    )
    session.log_params({"whatif_of": src.run_id, "sweep_name": sweep_name})
    return session


def _load(when: str) -> dict[str, float]:
    """The machine's 1-minute load average now (the what-if's own record of how busy it was)."""
    try:
        return {
            f"whatif_load_average_1m_{when}": os.getloadavg()[0],
            "whatif_cpu_count": float(os.cpu_count() or 0),
        }
    except OSError:
        return {}


def _todo(sweep_plan, experiment: str) -> list[str]:
    """The sweep key of every planned run not finished by an earlier invocation (what the budget
    has to fit)."""
    done = existing_state(sweep_plan.spec.name, sweep_plan.env_label, experiment).done
    return [key for _, r, key in sweep_plan.runs if (key, r) not in done]


def _say_predictions(logged: dict) -> None:
    for p in logged["moves"]:
        lo, hi = p["predicted_low"], p["predicted_high"]
        what = (
            f"x{lo:.3g}-{hi:.3g}"
            if lo is not None and hi is not None
            else f"nothing ({p['why_not']})"
        )
        console.info(f"predicted {p['move']} ({p['knob']} {p['from']} -> {p['to']}): {what}")
    for line in logged.get("no_move", []):
        console.info(f"no move: {line}")


def checks(
    logged: dict, outcomes: list[ChildOutcome], row_of: dict, client, batch: int
) -> list[dict]:
    """One row per logged prediction: its measured speed-up over the original's runs of this
    sweep, the interval, the verdict (roofline/scoring.py) and the runs."""
    runs = _runs(outcomes, row_of, client)
    at_ms = logged.get("predicted_at_ms") or 0
    early = {n: [r for r in rs if r["start_ms"] < at_ms] for n, rs in runs.items()}
    orig = meas.side(planning.ORIGINAL, runs.get(planning.ORIGINAL, []), batch)
    failed = _failures(outcomes, row_of)
    rows = []
    for p in logged["moves"]:
        name = p["move"]
        per_step = float(p["to"]) if p["knob"] == "batch_size" else batch
        side = meas.side(name, runs.get(name, []), per_step)
        m = meas.measured(orig, side)
        before = early.get(name, []) + early.get(planning.ORIGINAL, [])
        if before:
            m = Measured(
                m.speedup,
                m.low,
                m.high,
                f"{len(before)} of its runs started before the predictions were logged",
            )
        elif side.throughput is None and name in failed:
            m = Measured(None, None, None, f"its runs did not measure: {failed[name]}")
        v, why = verdict(p["predicted_low"], p["predicted_high"], p["why_not"], m)
        rows.append(_row(p, m, v, why, orig, side))
    return rows


def _row(p: dict, m: Measured, v: str, why: str, orig: meas.Side, side: meas.Side) -> dict:
    return {
        "move": p["move"],
        "knob": p["knob"],
        "from": p["from"],
        "to": p["to"],
        "predicted_low": p["predicted_low"],
        "predicted_high": p["predicted_high"],
        "measured": m.speedup,
        "measured_low": m.low,
        "measured_high": m.high,
        "verdict": v,
        "why": why,
        "original_samples_per_s": orig.throughput,
        "move_samples_per_s": side.throughput,
        "original_runs": list(orig.run_ids),
        "move_runs": list(side.run_ids),
        "assumes": p["assumes"],
    }


def _runs(outcomes: list[ChildOutcome], row_of: dict, client) -> dict[str, list[dict]]:
    """Row name -> its measured runs (run_id, step_time_mean_s, measured_iters, start_ms), read
    back from the store."""
    out: dict[str, list[dict]] = {}
    for o in outcomes:
        if o.status not in DONE or not o.run_id or o.sweep_key not in row_of:
            continue
        run = client.get_run(o.run_id)
        m = run.data.metrics
        out.setdefault(row_of[o.sweep_key], []).append(
            {
                "run_id": o.run_id,
                "step_time_mean_s": m.get("step_time_mean_s"),
                "measured_iters": m.get("measured_iters"),
                "start_ms": run.info.start_time or 0,
            }
        )
    return out


def _failures(outcomes: list[ChildOutcome], row_of: dict) -> dict[str, str]:
    """Row name -> the reason its first failed or left-out run gives."""
    out: dict[str, str] = {}
    for o in outcomes:
        if o.status in ("FAILED", "NOT_RUN") and o.sweep_key in row_of:
            out.setdefault(row_of[o.sweep_key], f"{o.status.lower()}: {o.error}")
    return out
