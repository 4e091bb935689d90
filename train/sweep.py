"""`python -m train.sweep`: a matrix of training benchmarks with repeats, safe to interrupt and resume.

One parent `sweep` run; one child `train` run per configuration and repeat. A configuration that
fails (out of memory, unsupported precision, ...) becomes a FAILED child with the reason and the
sweep goes on. Running the same sweep again skips every (configuration, repeat) already FINISHED
for this environment label on the tracking server (or kept offline in the spool) and redoes the
rest. See docs/sweep.md.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from common import schema
from common.cli import ArgumentParser, split_words
from common.errors import BenchError, UsageError, cli_entry, one_line
from train.config import TrainConfig, add_config_args

TAG_SWEEP_NAME = "sweep_name"
PARAM_REPEAT = "repeat"
AXIS_ALIASES = {"batch": "batch_size", "models": "model", "batch_sizes": "batch_size",
                "precisions": "precision", "image_sizes": "image_size"}
CONFIG_FIELDS = {f.name for f in fields(TrainConfig)}


@dataclass
class SweepSpec:
    """What to run. Every axis and base key is a TrainConfig field (docs/schema.md)."""

    matrix: dict[str, list]
    """axis -> values; the cross product of all axes is the set of configurations."""
    base: dict = field(default_factory=dict)
    """fields shared by every configuration (device, iters, image_size, data, ...)."""
    repeats: int = 1
    """runs per configuration; repeats of one configuration go to different passes over the matrix."""
    name: str | None = None
    """the sweep's name; re-running a sweep of the same name resumes it. Default: a hash of the spec."""

    def __post_init__(self) -> None:
        self.matrix = {AXIS_ALIASES.get(k, k): list(v) if isinstance(v, (list, tuple)) else [v]
                       for k, v in self.matrix.items()}
        self.base = {AXIS_ALIASES.get(k, k): v for k, v in self.base.items()}
        for key in [*self.matrix, *self.base]:
            if key not in CONFIG_FIELDS:
                raise ValueError(f"matrix: unknown field {key!r}; use TrainConfig fields such as model, batch_size, precision")
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix: axis {key!r} has no values")
        if int(self.repeats) < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats}")
        self.repeats = int(self.repeats)
        if not self.name:
            self.name = "sweep-" + self.digest()
        if not schema._KEY_RE.match(self.name):
            raise ValueError(f"name {self.name!r}: use letters, digits, _ - . / and spaces")

    def digest(self) -> str:
        blob = json.dumps({"matrix": self.matrix, "base": self.base, "repeats": self.repeats}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def configs(self) -> list[TrainConfig]:
        """Every configuration of the matrix, validated (ValueError names the combination)."""
        axes = list(self.matrix)
        out = []
        for combo in itertools.product(*(self.matrix[a] for a in axes)):
            values = {**self.base, **dict(zip(axes, combo))}
            try:
                out.append(TrainConfig(**values))
            except ValueError as exc:
                raise ValueError(f"{_describe(values)}: {exc}") from None
        return out

    def plan(self) -> list[tuple[TrainConfig, int]]:
        """(config, repeat) in run order: repeat-major, so slow drift of the machine spreads over all
        configurations instead of biasing the ones measured last."""
        configs = self.configs()
        return [(cfg, r) for r in range(self.repeats) for cfg in configs]


def load_spec_file(path: str) -> dict:
    """A sweep file (YAML or JSON): {name?, repeats?, matrix: {axis: [values]}, base?: {field: value}}."""
    import yaml

    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"sweep file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise UsageError(f"sweep file {p} is not valid YAML/JSON: {one_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("matrix"), dict):
        raise UsageError(f"sweep file {p} needs a `matrix:` mapping of axis -> list of values")
    unknown = set(data) - {"name", "repeats", "matrix", "base"}
    if unknown:
        raise UsageError(f"sweep file {p}: unknown keys {sorted(unknown)} (allowed: name, repeats, matrix, base)")
    return data


def _describe(values: dict) -> str:
    keys = ("model", "batch_size", "precision", "image_size")
    return " ".join(f"{k}={values[k]}" for k in keys if k in values) or "configuration"


def child_label(cfg: TrainConfig, repeat: int) -> str:
    return f"{cfg.model} b{cfg.batch_size} {cfg.precision} {cfg.image_size}px #{repeat}"


# ------------------------------------------------------------------ the tracking-server side
@dataclass
class SweepState:
    """What the tracking server (and the offline spool) already hold for a sweep on one env label."""

    parent_run_id: str | None = None
    done: set[tuple[str, int]] = field(default_factory=set)  # (config_key, repeat) FINISHED
    stale_running: list[str] = field(default_factory=list)  # children left RUNNING by a dead process
    reachable: bool = True


def existing_state(name: str, env_label: str, experiment: str | None) -> SweepState:
    import mlflow

    from common.tracking import experiment_id_for, is_unreachable, spooled_runs

    state = SweepState()
    for entry in spooled_runs():
        rec = entry["record"]
        tags, params = rec["tags"], rec["params"]
        if (rec["run_kind"] == "train" and entry["status"] == "FINISHED" and tags.get(TAG_SWEEP_NAME) == name
                and tags.get(schema.TAG_ENV_LABEL) == env_label):
            state.done.add((tags.get(schema.TAG_CONFIG_KEY, ""), int(params.get(PARAM_REPEAT, -1))))
    try:
        exp_id = experiment_id_for(experiment)
        if exp_id is None:
            return state
        filt = f"tags.{TAG_SWEEP_NAME} = '{name}' and tags.{schema.TAG_ENV_LABEL} = '{env_label}'"
        runs = mlflow.search_runs(experiment_ids=[exp_id], filter_string=filt, output_format="list", max_results=50_000)
    except Exception as exc:  # noqa: BLE001
        if not is_unreachable(exc):
            raise
        state.reachable = False
        return state
    for run in runs:
        kind = run.data.tags.get(schema.TAG_RUN_KIND)
        if kind == "sweep":
            state.parent_run_id = state.parent_run_id or run.info.run_id
        elif kind == "train" and run.info.status == "FINISHED":
            state.done.add((run.data.tags.get(schema.TAG_CONFIG_KEY, ""), int(run.data.params.get(PARAM_REPEAT, -1))))
        elif kind == "train" and run.info.status == "RUNNING":
            state.stale_running.append(run.info.run_id)
    return state


def close_stale(run_ids: list[str]) -> None:
    """Children a killed sweep left RUNNING: FAILED, with the reason, so they are never mistaken for done."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    for run_id in run_ids:
        client.set_tag(run_id, schema.TAG_ERROR, "interrupted: the sweep process ended before this run finished")
        client.set_terminated(run_id, status="FAILED")


# ------------------------------------------------------------------ running
@dataclass
class ChildOutcome:
    label: str
    config_key: str
    repeat: int
    status: str  # FINISHED | FAILED | SKIPPED | OFFLINE
    run_id: str | None = None
    throughput_samples_per_s: float | None = None
    step_time_median_s: float | None = None
    error: str | None = None


def run_sweep(spec: SweepSpec, *, experiment: str | None = None, env_label: str | None = None,
              progress: bool = True, quiet: bool = False,
              on_child_done: Callable[[ChildOutcome], None] | None = None) -> list[ChildOutcome]:
    """Run (or resume) the sweep; returns one outcome per planned (configuration, repeat)."""
    from common.tracking import RunSession
    from train.__main__ import run as run_train

    plan = spec.plan()  # validates every configuration before anything runs
    label = plan[0][0].env_label if env_label is None else env_label
    for cfg, _ in plan:
        cfg.env_label = label
    state = existing_state(spec.name, label, experiment)
    if not state.reachable:
        _say(quiet, "warning: tracking server unreachable: resuming from locally spooled runs only; "
                    "this sweep's runs are kept offline (python -m common.upload sends them later)")
    elif state.stale_running:
        close_stale(state.stale_running)
        _say(quiet, f"marked {len(state.stale_running)} run(s) left RUNNING by an interrupted sweep as FAILED")

    outcomes: list[ChildOutcome] = []
    todo = [(cfg, r) for cfg, r in plan if (cfg.config_key(), r) not in state.done]
    skipped = len(plan) - len(todo)
    if skipped:
        _say(quiet, f"resuming sweep {spec.name}: {skipped} of {len(plan)} run(s) already finished, {len(todo)} to go")
    for cfg, r in plan:
        if (cfg.config_key(), r) in state.done:
            outcomes.append(ChildOutcome(child_label(cfg, r), cfg.config_key(), r, "SKIPPED"))

    parent = RunSession("sweep", experiment=experiment, run_name=spec.name, run_id=state.parent_run_id,
                        tags={TAG_SWEEP_NAME: spec.name, schema.TAG_ENV_LABEL: label, schema.TAG_HOST: _host()},
                        quiet=quiet)
    with parent:
        parent.log_params({"sweep_matrix": json.dumps(spec.matrix, sort_keys=True),
                           "sweep_base": json.dumps(spec.base, sort_keys=True, default=str),
                           "sweep_repeats": spec.repeats, "sweep_configs": len(plan) // spec.repeats})
        parent.flush()
        bar = _bar(len(todo), progress)
        try:
            for cfg, r in todo:
                bar.set_description_str(child_label(cfg, r))
                outcome = _run_child(run_train, cfg, r, spec, experiment, parent, quiet)
                outcomes.append(outcome)
                bar.update(1)
                if outcome.status == "FAILED":
                    bar.write(f"FAILED {outcome.label}: {outcome.error}")
                if on_child_done is not None:
                    on_child_done(outcome)
        finally:
            bar.close()
            counts = {s: sum(o.status == s for o in outcomes) for s in ("FINISHED", "FAILED", "SKIPPED", "OFFLINE")}
            parent.log_metrics({f"children_{k.lower()}": float(v) for k, v in counts.items()}
                               | {"children_planned": float(len(plan))})
            order = {(cfg.config_key(), r): i for i, (cfg, r) in enumerate(plan)}
            outcomes.sort(key=lambda o: order[(o.config_key, o.repeat)])
            parent.log_text("sweep/summary.csv", summary_csv(outcomes))
    return outcomes


def _run_child(run_train, cfg: TrainConfig, repeat: int, spec: SweepSpec, experiment, parent, quiet) -> ChildOutcome:
    label = child_label(cfg, repeat)
    try:
        session, result = run_train(cfg, experiment=experiment, progress=False, system_metrics=False, parent=parent,
                                    extra_params={PARAM_REPEAT: repeat}, extra_tags={TAG_SWEEP_NAME: spec.name},
                                    quiet=True, record_preflight_failure=True)
    except BenchError as exc:
        return ChildOutcome(label, cfg.config_key(), repeat, "FAILED", error=one_line(exc))
    status = "OFFLINE" if session.offline else "FINISHED"
    m = result.metrics
    return ChildOutcome(label, cfg.config_key(), repeat, status, session.run_id,
                        m["throughput_samples_per_s"], m["step_time_median_s"])


def summary_csv(outcomes: list[ChildOutcome]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["configuration", "repeat", "status", "throughput_samples_per_s", "step_time_median_s", "run_id", "config_key", "error"])
    for o in outcomes:
        w.writerow([o.label.rsplit(" #", 1)[0], o.repeat, o.status, o.throughput_samples_per_s, o.step_time_median_s,
                    o.run_id, o.config_key, o.error])
    return buf.getvalue()


def summary_table(outcomes: list[ChildOutcome]) -> str:
    lines = ["| configuration | repeat | status | samples/s | ms/step |", "|---|---|---|---|---|"]
    for o in outcomes:
        sps = f"{o.throughput_samples_per_s:.2f}" if o.throughput_samples_per_s else ""
        ms = f"{o.step_time_median_s * 1e3:.1f}" if o.step_time_median_s else ""
        lines.append(f"| {o.label.rsplit(' #', 1)[0]} | {o.repeat} | {o.status} | {sps} | {ms} |")
    return "\n".join(lines)


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", disable=not enabled, dynamic_ncols=True,
                bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} runs [{elapsed}<{remaining}]")


def _host() -> str:
    import socket

    return socket.gethostname()


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr)


# ------------------------------------------------------------------ CLI
def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m train.sweep", description=__doc__.split("\n\n")[0])
    add_config_args(parser)
    # Config flags given on the command line override the sweep file's base; unset ones stay None.
    # An empty value ("" from an MLproject default) also counts as not given.
    for action in parser._actions:
        if action.dest in CONFIG_FIELDS:
            action.default = None
            action.type = _empty_is_none(action.type)
            if action.choices is not None:
                action.choices = [*action.choices, None]
    m = parser.add_argument_group("matrix")
    m.add_argument("--matrix", metavar="FILE", type=_empty_is_none(str),
                   help="YAML/JSON sweep file: {name, repeats, matrix: {axis: [...]}, base: {...}}")
    m.add_argument("--models", nargs="+", type=_list_of(str), help="model axis, e.g. resnet18 resnet50")
    m.add_argument("--batch-sizes", nargs="+", type=_list_of(int), help="batch axis, e.g. 16 32 64")
    m.add_argument("--precisions", nargs="+", type=_list_of(str), help="precision axis, e.g. fp32 bf16")
    m.add_argument("--image-sizes", nargs="+", type=_list_of(int), help="image size axis")
    m.add_argument("--repeats", type=_empty_is_none(int), default=None, help="runs per configuration (default 1)")
    m.add_argument("--name", type=_empty_is_none(str), default=None,
                   help="sweep name (default: a hash of the matrix); the same name resumes")
    out = parser.add_argument_group("output")
    out.add_argument("--experiment", default=None, help="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME or Default)")
    out.add_argument("--no-progress", action="store_true")
    out.add_argument("--dry-run", action="store_true", help="print the plan and what would be skipped; run nothing")
    return parser


def _empty_is_none(convert):
    def parse(text):
        if text is None or str(text).strip() == "":
            return None
        return convert(text) if convert is not None else text

    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its errors
    return parse


def _list_of(convert):
    """One flag value holding a list ("resnet18 resnet50" or "16,32", as MLproject passes it)."""

    def parse(text):
        return [convert(v) for v in split_words(text)]

    parse.__name__ = convert.__name__
    return parse


def _flat(values):
    return [v for chunk in values for v in chunk] if values else None


def spec_from_args(args) -> SweepSpec:
    data = load_spec_file(args.matrix) if args.matrix else {"matrix": {}}
    matrix = dict(data.get("matrix") or {})
    for flag, axis in (("models", "model"), ("batch_sizes", "batch_size"), ("precisions", "precision"),
                       ("image_sizes", "image_size")):
        values = _flat(getattr(args, flag))
        if values:
            matrix[axis] = values
    base = dict(data.get("base") or {})
    for name in CONFIG_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            if name in matrix:
                raise UsageError(f"--{name.replace('_', '-')} is a single value but {name} is a matrix axis: use one or the other")
            base[name] = value
    if not matrix:
        raise UsageError("nothing to sweep: give --models/--batch-sizes/--precisions/--image-sizes or --matrix FILE")
    repeats = args.repeats if args.repeats is not None else data.get("repeats", 1)
    try:
        return SweepSpec(matrix=matrix, base=base, repeats=repeats, name=args.name or data.get("name"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    try:
        plan = spec.plan()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    env_label = plan[0][0].env_label
    if args.dry_run:
        state = existing_state(spec.name, env_label, args.experiment)
        for cfg, r in plan:
            done = (cfg.config_key(), r) in state.done
            print(f"{'skip' if done else 'run '}  {child_label(cfg, r)}  config_key={cfg.config_key()}")
        print(f"sweep {spec.name} on {env_label}: {len(plan)} run(s) planned, {sum((c.config_key(), r) in state.done for c, r in plan)} already done")
        return 0
    print(f"sweep {spec.name} on {env_label}: {len(plan) // spec.repeats} configuration(s) x {spec.repeats} repeat(s)", file=sys.stderr)
    t0 = time.perf_counter()
    outcomes = run_sweep(spec, experiment=args.experiment, env_label=env_label, progress=not args.no_progress)
    print(summary_table(outcomes))
    failed = [o for o in outcomes if o.status == "FAILED"]
    counts = {s: sum(o.status == s for o in outcomes) for s in ("FINISHED", "SKIPPED", "FAILED", "OFFLINE")}
    print(f"sweep {spec.name}: {counts['FINISHED']} finished, {counts['SKIPPED']} skipped (done before), "
          f"{counts['FAILED']} failed, {counts['OFFLINE']} kept offline, in {time.perf_counter() - t0:.0f} s")
    for o in failed:
        print(f"  failed: {o.label}: {o.error}")
    if counts["OFFLINE"]:
        print("  offline runs are in the spool: send them with `python -m common.upload` when the server is back")
    return 1 if failed and not (counts["FINISHED"] or counts["SKIPPED"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
