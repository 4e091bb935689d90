"""`python -m train.sweep`: a matrix of training benchmarks with repeats, safe to interrupt and resume.

One parent `sweep` run; one child `train` run per configuration and repeat. A configuration that
fails (out of memory, unsupported precision, ...) becomes a FAILED child with the reason and the
sweep goes on. Running the same sweep again skips every (configuration, repeat) already FINISHED
for this environment label on the tracking server (or kept offline in the spool) and redoes the
rest; a configuration is every TrainConfig field but env_label (`sweep_key`). See docs/sweep.md.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from common import schema
from common.cli import ArgumentParser, cli_entry, optional, split_words
from common.errors import UsageError, one_line
from train.config import TrainConfig, add_config_args

TAG_SWEEP_NAME = "sweep_name"
TAG_SWEEP_KEY = "sweep_key"  # which (configuration) of the sweep a child measured: see sweep_key()
TAG_RESUME_OF = (
    "sweep_resume_of"  # on the run `mlflow run` made for a resumed sweep: the parent it resumed
)
PARAM_REPEAT = "repeat"
AXIS_ALIASES = {
    "batch": "batch_size",
    "models": "model",
    "batch_sizes": "batch_size",
    "precisions": "precision",
    "image_sizes": "image_size",
}
CONFIG_FIELDS = {f.name for f in fields(TrainConfig)}
LABEL_AXES = ("model", "batch_size", "precision", "image_size")  # always in a child's label


@dataclass
class SweepSpec:
    """What to run. Every axis and base key is a TrainConfig field (docs/schema.md)."""

    matrix: dict[str, list]
    """axis -> values; the cross product of all axes is the set of configurations. Repeated values
    of an axis count once."""
    base: dict = field(default_factory=dict)
    """fields shared by every configuration (device, iters, image_size, data, ...)."""
    repeats: int = 1
    """runs per configuration; repeats of one configuration go to different passes over the matrix."""
    name: str | None = None
    """the sweep's name; re-running a sweep of the same name resumes it. Default: a hash of the spec."""
    env_label: str | None = None
    """the machine's label (default: base's env_label, else the host name). Not part of the spec's
    identity: every machine running the same sweep gets the same default name."""

    def __post_init__(self) -> None:
        self.matrix = {
            AXIS_ALIASES.get(k, k): _unique(v) if isinstance(v, (list, tuple)) else [v]
            for k, v in self.matrix.items()
        }
        self.base = {AXIS_ALIASES.get(k, k): v for k, v in self.base.items()}
        for key in [*self.matrix, *self.base]:
            if key not in CONFIG_FIELDS:
                raise ValueError(
                    f"matrix: unknown field {key!r}; use TrainConfig fields such as model, batch_size, precision"
                )
        if "env_label" in self.matrix:
            raise ValueError(
                "matrix: env_label cannot be an axis; run the sweep on each machine with its own --env-label"
            )
        label = self.base.pop("env_label", None)
        self.env_label = self.env_label or label or None
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix: axis {key!r} has no values")
        if int(self.repeats) < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats}")
        self.repeats = int(self.repeats)
        if not self.name:
            self.name = "sweep-" + self.digest()
        try:
            schema.check_key(self.name)
        except ValueError:
            raise ValueError(
                f"name {self.name!r}: use letters, digits, _ - . / and spaces"
            ) from None

    def digest(self) -> str:
        blob = json.dumps(
            {"matrix": self.matrix, "base": self.base, "repeats": self.repeats},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def configs(self) -> list[TrainConfig]:
        """Every distinct configuration of the matrix, validated (ValueError names the combination).

        Combinations that TrainConfig normalises to the same configuration ("FP32" and "fp32") count once.
        """
        axes = list(self.matrix)
        out, seen = [], set()
        for combo in itertools.product(*(self.matrix[a] for a in axes)):
            values = {**self.base, **dict(zip(axes, combo))}
            if self.env_label:
                values["env_label"] = self.env_label
            try:
                cfg = TrainConfig(**values)
            except ValueError as exc:
                raise ValueError(f"{_describe(values)}: {exc}") from None
            key = sweep_key(cfg)
            if key not in seen:
                seen.add(key)
                out.append(cfg)
        return out

    def plan(self) -> list[tuple[TrainConfig, int]]:
        """(config, repeat) in run order: repeat-major, so slow drift of the machine spreads over all
        configurations instead of biasing the ones measured last."""
        configs = self.configs()
        return [(cfg, r) for r in range(self.repeats) for cfg in configs]

    def run_params(self) -> dict:
        """The parent run's params: what identifies the sweep besides its name."""
        return {
            "sweep_matrix": json.dumps(self.matrix, sort_keys=True),
            "sweep_base": json.dumps(self.base, sort_keys=True, default=str),
            "sweep_repeats": self.repeats,
        }


def _unique(values) -> list:
    """`values` without repeats, first occurrence first (`--models resnet18 resnet18` runs once)."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def sweep_key(cfg: TrainConfig) -> str:
    """Stable 16-hex-digit hash of every field of `cfg` except env_label: what resume compares.

    `config_key` (the join key of the analysis) leaves out fields that do not change the work per
    step (data source, device, seed, lr, iteration counts, workers); two configurations of one sweep
    can differ only there (`data: [synthetic, fake]`), so resume needs this finer key.
    """
    values = {f.name: getattr(cfg, f.name) for f in fields(TrainConfig) if f.name != "env_label"}
    return schema.stable_hash(
        values, lower_strings=False
    )  # case kept: data paths are case-sensitive


def check_models(spec: SweepSpec) -> None:
    """Every model name of the sweep exists (UsageError with close names otherwise); names are
    replaced by torchvision's spelling so that equal models get equal keys."""
    from train.models import check_model_name

    if "model" in spec.matrix:
        spec.matrix["model"] = _unique(
            check_model_name(str(m).strip()) for m in spec.matrix["model"]
        )
    elif "model" in spec.base:
        spec.base["model"] = check_model_name(str(spec.base["model"]).strip())


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
        raise UsageError(
            f"sweep file {p}: unknown keys {sorted(unknown)} (allowed: name, repeats, matrix, base)"
        )
    return data


def _describe(values: dict) -> str:
    keys = ("model", "batch_size", "precision", "image_size")
    return " ".join(f"{k}={values[k]}" for k in keys if k in values) or "configuration"


def child_label(cfg: TrainConfig, repeat: int, axes=()) -> str:
    """`resnet18 b2 fp32 32px #0`, plus `axis=value` for every other axis in `axes` (`data=fake`)."""
    extra = "".join(f" {a}={getattr(cfg, a)}" for a in axes if a not in LABEL_AXES)
    return f"{cfg.model} b{cfg.batch_size} {cfg.precision} {cfg.image_size}px{extra} #{repeat}"


# ------------------------------------------------------------------ the tracking-server side
@dataclass
class SweepState:
    """What the tracking server (and the offline spool) already hold for a sweep on one env label."""

    parent_run_id: str | None = None
    parent_local_id: str | None = None  # the parent's spool entry, if it was kept offline
    parent_params: dict = field(default_factory=dict)
    done: set[tuple[str, int]] = field(default_factory=set)  # (sweep_key, repeat) FINISHED
    spooled: set[tuple[str, int]] = field(
        default_factory=set
    )  # of those, kept in the spool (not yet uploaded)
    remembered: set[tuple[str, int]] = field(
        default_factory=set
    )  # of those, known from the local ledger only
    stale_running: list[str] = field(
        default_factory=list
    )  # children left RUNNING by a dead process
    reachable: bool = True


def _is_mine(entry: dict, name: str, env_label: str) -> bool:
    """A spool entry of this sweep on this env label, meant for the tracking server in use."""
    from common.tracking import same_tracking_uri

    tags = entry["record"]["tags"]
    return (
        tags.get(TAG_SWEEP_NAME) == name
        and tags.get(schema.TAG_ENV_LABEL) == env_label
        and same_tracking_uri(entry.get("tracking_uri"))
    )


def existing_state(
    name: str, env_label: str, experiment: str | None, reachable: bool | None = None
) -> SweepState:
    """Done runs, the parent and stale children of the sweep, from the spool and (if it answers its
    quick /health check) the server. `reachable=False` skips the server without asking it."""
    import mlflow

    from common.tracking import experiment_id_for, is_unreachable, server_reachable, spooled_runs

    label_literal = schema.filter_literal(env_label, "env label")
    state = SweepState(reachable=server_reachable() if reachable is None else reachable)
    spooled_ids = set()
    for entry in spooled_runs():
        if not _is_mine(entry, name, env_label):
            continue
        rec = entry["record"]
        if entry.get("run_id"):
            spooled_ids.add(entry["run_id"])
        if rec["run_kind"] == "sweep" and state.parent_local_id is None:
            state.parent_local_id, state.parent_params = entry["local_id"], dict(rec["params"])
            state.parent_run_id = entry.get("run_id")
        elif (
            rec["run_kind"] == "train"
            and entry["status"] == "FINISHED"
            and rec["tags"].get(TAG_SWEEP_KEY)
        ):
            state.spooled.add(
                (rec["tags"][TAG_SWEEP_KEY], int(rec["params"].get(PARAM_REPEAT, -1)))
            )
    state.done |= state.spooled
    if not state.reachable:
        # What reached the server before it went away: this machine's own ledger of it.
        state.remembered = _read_ledger(name, env_label) - state.done
        state.done |= state.remembered
        return state
    try:
        exp_id = experiment_id_for(experiment)
        if exp_id is None:
            return state
        filt = f"tags.{TAG_SWEEP_NAME} = {schema.filter_literal(name, 'sweep name')} and tags.{schema.TAG_ENV_LABEL} = {label_literal}"
        runs = mlflow.search_runs(
            experiment_ids=[exp_id],
            filter_string=filt,
            output_format="list",
            max_results=50_000,
            order_by=["attributes.start_time ASC"],
        )
    except Exception as exc:  # noqa: BLE001
        if not is_unreachable(exc):
            raise
        state.reachable = False
        return state
    for run in runs:
        tags = run.data.tags
        kind = tags.get(schema.TAG_RUN_KIND)
        if kind == "sweep" and TAG_RESUME_OF not in tags:
            if state.parent_run_id in (
                None,
                run.info.run_id,
            ):  # the first parent; a spooled one is the same run
                state.parent_run_id = run.info.run_id
                state.parent_params = state.parent_params or dict(run.data.params)
        elif kind == "train" and run.info.status == "FINISHED" and tags.get(TAG_SWEEP_KEY):
            state.done.add((tags[TAG_SWEEP_KEY], int(run.data.params.get(PARAM_REPEAT, -1))))
        elif (
            kind == "train" and run.info.status == "RUNNING" and run.info.run_id not in spooled_ids
        ):
            state.stale_running.append(
                run.info.run_id
            )  # a spooled one is completed by upload instead
    _write_ledger(name, env_label, state.done - state.spooled)
    return state


def _ledger_path(name: str, env_label: str) -> Path:
    """This machine's record of the sweep's runs FINISHED on the server (consulted only while the
    server is unreachable, so that an offline resume does not redo them). Next to the spool."""
    from common.tracking import spool_dir, tracking_uri

    ident = json.dumps([tracking_uri().rstrip("/"), name, env_label])
    return spool_dir() / "sweeps" / f"{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


def _read_ledger(name: str, env_label: str) -> set[tuple[str, int]]:
    try:
        data = json.loads(_ledger_path(name, env_label).read_text())
        return {(str(k), int(r)) for k, r in data["done"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _write_ledger(name: str, env_label: str, done: set[tuple[str, int]]) -> None:
    path = _ledger_path(name, env_label)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"sweep_name": name, "env_label": env_label, "done": sorted(done)})
        )
        tmp.replace(path)
    except OSError:
        pass  # a convenience for offline resumes; never a reason to fail the sweep


def check_same_spec(spec: SweepSpec, state: SweepState, env_label: str) -> None:
    """A name stands for one matrix: resuming it with another matrix, base or repeats is refused
    (the parent's params are immutable and would describe a different sweep)."""
    if not state.parent_params:
        return
    old, new = state.parent_params, spec.run_params()

    def parsed(key, text):
        value = json.loads(text) if key != "sweep_repeats" else int(float(text))
        if key == "sweep_base" and isinstance(value, dict):
            value.pop("env_label", None)  # older sweeps kept the label in the base
        if key == "sweep_matrix" and isinstance(value, dict):
            value = {
                k: _unique(v) if isinstance(v, list) else v for k, v in value.items()
            }  # and repeated values
        return value

    names = {
        "sweep_matrix": "matrix",
        "sweep_base": "base configuration",
        "sweep_repeats": "repeats",
    }
    changed = []
    for key, what in names.items():
        if key in old:
            try:
                same = parsed(key, old[key]) == parsed(key, str(new[key]))
            except (ValueError, TypeError):
                same = old[key] == str(new[key])
            if not same:
                changed.append(f"{what} (was {old[key][:120]})")
    if changed:
        raise UsageError(
            f"sweep {spec.name!r} on {env_label} already exists with a different {'; '.join(changed)}: "
            "give this matrix a new --name, or run the original command to resume it"
        )


def close_stale(run_ids: list[str]) -> None:
    """Children a killed sweep left RUNNING: FAILED, with the reason, so they are never mistaken for done."""
    from common.tracking import mark_failed

    for run_id in run_ids:
        mark_failed(run_id, "interrupted: the sweep process ended before this run finished")


def upload_own_spool(name: str, env_label: str, quiet: bool) -> bool:
    """Send this sweep's spooled runs (kept offline by an earlier attempt) before resuming, so that the
    server alone says what is done. Returns whether the server is still reachable."""
    from common.tracking import is_unreachable, server_reachable, upload_spooled

    try:
        sent, left = upload_spooled(
            say=lambda *_: None, select=lambda e: _is_mine(e, name, env_label)
        )
    except Exception as exc:  # noqa: BLE001 - a run the server refuses stays spooled (and counts as done)
        if is_unreachable(exc):
            return False
        _say(
            quiet,
            f"warning: could not upload this sweep's spooled runs ({one_line(exc)[:200]}); "
            "they stay in the spool: see python -m common.upload --list",
        )
        return True
    if sent:
        _say(quiet, f"uploaded {sent} run(s) of sweep {name} kept offline by an earlier attempt")
    return not left or server_reachable()


# ------------------------------------------------------------------ running
@dataclass
class ChildOutcome:
    label: str
    config_key: str
    sweep_key: str
    repeat: int
    status: str  # FINISHED | FAILED | SKIPPED | OFFLINE
    run_id: str | None = None
    throughput_samples_per_s: float | None = None
    step_time_median_s: float | None = None
    error: str | None = None


def run_sweep(
    spec: SweepSpec,
    *,
    experiment: str | None = None,
    env_label: str | None = None,
    progress: bool = True,
    quiet: bool = False,
    on_child_done: Callable[[ChildOutcome], None] | None = None,
) -> list[ChildOutcome]:
    """Run (or resume) the sweep; returns one outcome per planned (configuration, repeat)."""
    from common.tracking import RunSession, redirect_run, server_reachable
    from train.__main__ import run as run_train

    check_models(spec)
    plan = spec.plan()  # validates every configuration before anything runs
    label = env_label or spec.env_label or plan[0][0].env_label
    schema.filter_literal(label, "env label")
    for cfg, _ in plan:
        cfg.env_label = label
    keys = [sweep_key(cfg) for cfg, _ in plan]  # before running: run_train normalises some fields
    axes = list(spec.matrix)

    reachable = (
        server_reachable()
    )  # one quick GET /health: a dead server costs seconds, not minutes
    if reachable:
        reachable = upload_own_spool(spec.name, label, quiet)
    state = existing_state(spec.name, label, experiment, reachable=reachable)
    check_same_spec(spec, state, label)
    if not state.reachable:
        _say(
            quiet,
            "warning: tracking server unreachable: runs already done are known from this machine's spool "
            "and ledger only; this sweep's runs are kept offline (python -m common.upload sends them later)",
        )
    elif state.stale_running:
        close_stale(state.stale_running)
        _say(
            quiet,
            f"marked {len(state.stale_running)} run(s) left RUNNING by an interrupted sweep as FAILED",
        )

    outcomes: list[ChildOutcome] = []
    todo = []
    for (cfg, r), key in zip(plan, keys):
        if (key, r) in state.done:
            outcomes.append(
                ChildOutcome(child_label(cfg, r, axes), cfg.config_key(), key, r, "SKIPPED")
            )
        else:
            todo.append((cfg, r, key))
    if outcomes:
        notes = [f"{len(state.spooled)} kept offline"] if state.spooled else []
        notes += (
            [f"{len(state.remembered)} known from this machine's ledger"]
            if state.remembered
            else []
        )
        _say(
            quiet,
            f"resuming sweep {spec.name}: {len(outcomes)} of {len(plan)} run(s) already finished"
            + (f" ({', '.join(notes)})" if notes else "")
            + f", {len(todo)} to go",
        )

    tags = {
        TAG_SWEEP_NAME: spec.name,
        schema.TAG_ENV_LABEL: label,
        schema.TAG_HOST: schema.host_name(),
    }
    env_run = os.environ.get("MLFLOW_RUN_ID")
    if env_run and state.reachable and state.parent_run_id and env_run != state.parent_run_id:
        # `mlflow run` made a new run for this invocation, but the sweep already has its parent: say
        # so in that run (nested under the parent) instead of leaving it empty.
        del os.environ["MLFLOW_RUN_ID"]
        redirect_run(
            env_run,
            state.parent_run_id,
            {schema.TAG_RUN_KIND: "sweep", **tags, TAG_RESUME_OF: state.parent_run_id},
            f"Resumed sweep {spec.name} ({label}): its children and summary are in run {state.parent_run_id}.",
        )
    parent = RunSession(
        "sweep",
        experiment=experiment,
        run_name=spec.name,
        run_id=state.parent_run_id,
        tags=tags,
        quiet=quiet,
        offline=not state.reachable,
        local_id=None if state.reachable else state.parent_local_id,
    )
    with parent:
        parent.log_params({**spec.run_params(), "sweep_configs": len(plan) // spec.repeats})
        parent.flush()
        bar = _bar(len(todo), progress)
        try:
            for cfg, r, key in todo:
                bar.set_description_str(child_label(cfg, r, axes))
                outcome = _run_child(run_train, cfg, r, key, axes, spec, experiment, parent)
                outcomes.append(outcome)
                if outcome.status == "FINISHED":
                    state.done.add((key, r))
                    _write_ledger(spec.name, label, state.done - state.spooled)
                bar.update(1)
                if outcome.status == "FAILED":
                    bar.write(f"FAILED {outcome.label}: {outcome.error}")
                if on_child_done is not None:
                    on_child_done(outcome)
        finally:
            bar.close()
            counts = {
                s: sum(o.status == s for o in outcomes)
                for s in ("FINISHED", "FAILED", "SKIPPED", "OFFLINE")
            }
            parent.log_metrics(
                {f"children_{k.lower()}": float(v) for k, v in counts.items()}
                | {"children_planned": float(len(plan))}
            )
            order = {(key, r): i for i, ((_, r), key) in enumerate(zip(plan, keys))}
            outcomes.sort(key=lambda o: order[(o.sweep_key, o.repeat)])
            parent.log_text("sweep/summary.csv", summary_csv(outcomes))
            if outcomes and all(o.status == "FAILED" for o in outcomes):
                parent.fail(f"all {len(outcomes)} run(s) failed; first: {outcomes[0].error}")
    return outcomes


def _run_child(
    run_train, cfg: TrainConfig, repeat: int, key: str, axes, spec: SweepSpec, experiment, parent
) -> ChildOutcome:
    """One child run. Any exception (not an interrupt) becomes a FAILED child with its one-line reason."""
    label = child_label(cfg, repeat, axes)
    n_before = len(parent.children)
    extra_tags = {TAG_SWEEP_NAME: spec.name, TAG_SWEEP_KEY: key}
    try:
        session, result = run_train(
            cfg,
            experiment=experiment,
            progress=False,
            system_metrics=False,
            parent=parent,
            extra_params={PARAM_REPEAT: repeat},
            extra_tags=extra_tags,
            quiet=True,
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
        m["step_time_median_s"],
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
        run_name=cfg.run_name(),
        parent=parent,
        quiet=True,
        tags={
            schema.TAG_ENV_LABEL: cfg.env_label,
            schema.TAG_HOST: schema.host_name(),
            schema.TAG_DEVICE_TYPE: cfg.device,
            schema.TAG_CONFIG_KEY: cfg.config_key(),
            **extra_tags,
        },
    )
    try:
        with session:
            session.log_params({**cfg.params(), PARAM_REPEAT: repeat})
            session.fail(reason)
    except Exception as exc:  # noqa: BLE001 - the outcome still says FAILED with the reason
        _say(False, f"note: could not record the failed run ({one_line(exc)[:200]})")
    return session.run_id


def summary_csv(outcomes: list[ChildOutcome]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "configuration",
            "repeat",
            "status",
            "throughput_samples_per_s",
            "step_time_median_s",
            "run_id",
            "config_key",
            "sweep_key",
            "error",
        ]
    )
    for o in outcomes:
        w.writerow(
            [
                o.label.rsplit(" #", 1)[0],
                o.repeat,
                o.status,
                o.throughput_samples_per_s,
                o.step_time_median_s,
                o.run_id,
                o.config_key,
                o.sweep_key,
                o.error,
            ]
        )
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

    return tqdm(
        total=total,
        unit="run",
        disable=not enabled,
        dynamic_ncols=True,
        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} runs [{elapsed}<{remaining}]",
    )


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr)


# ------------------------------------------------------------------ CLI
def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m train.sweep", description=__doc__.split("\n\n")[0])
    # Config flags given on the command line override the sweep file's base; unset ones stay None.
    add_config_args(parser, overrides=True)
    m = parser.add_argument_group("matrix")
    m.add_argument(
        "--matrix",
        metavar="FILE",
        type=optional(str),
        help="YAML/JSON sweep file: {name, repeats, matrix: {axis: [...]}, base: {...}}",
    )
    m.add_argument(
        "--models", nargs="+", type=_list_of(str), help="model axis, e.g. resnet18 resnet50"
    )
    m.add_argument("--batch-sizes", nargs="+", type=_list_of(int), help="batch axis, e.g. 16 32 64")
    m.add_argument(
        "--precisions", nargs="+", type=_list_of(str), help="precision axis, e.g. fp32 bf16"
    )
    m.add_argument("--image-sizes", nargs="+", type=_list_of(int), help="image size axis")
    m.add_argument(
        "--repeats",
        type=optional(int),
        default=None,
        help="runs per configuration (default 1)",
    )
    m.add_argument(
        "--name",
        type=optional(str),
        default=None,
        help="sweep name (default: a hash of the matrix); the same name resumes",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--experiment",
        default=None,
        type=optional(str),
        help="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    out.add_argument("--no-progress", action="store_true")
    out.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and what would be skipped; run nothing",
    )
    return parser


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
    for flag, axis in (
        ("models", "model"),
        ("batch_sizes", "batch_size"),
        ("precisions", "precision"),
        ("image_sizes", "image_size"),
    ):
        values = _flat(getattr(args, flag))
        if values:
            matrix[axis] = values
    base = dict(data.get("base") or {})
    for name in CONFIG_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            if name in matrix:
                raise UsageError(
                    f"--{name.replace('_', '-')} is a single value but {name} is a matrix axis: use one or the other"
                )
            base[name] = value
    if not matrix:
        raise UsageError(
            "nothing to sweep: give --models/--batch-sizes/--precisions/--image-sizes or --matrix FILE"
        )
    repeats = args.repeats if args.repeats is not None else data.get("repeats", 1)
    try:
        return SweepSpec(
            matrix=matrix, base=base, repeats=repeats, name=args.name or data.get("name")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    check_models(spec)  # a typo'd model name is one line before anything runs
    try:
        plan = spec.plan()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    env_label = spec.env_label or plan[0][0].env_label
    if args.dry_run:
        state = existing_state(spec.name, env_label, args.experiment)
        check_same_spec(spec, state, env_label)
        axes = list(spec.matrix)
        keys = [sweep_key(cfg) for cfg, _ in plan]
        for (cfg, r), key in zip(plan, keys):
            print(
                f"{'skip' if (key, r) in state.done else 'run '}  {child_label(cfg, r, axes)}  sweep_key={key}"
            )
        n_done = sum((key, r) in state.done for (_, r), key in zip(plan, keys))
        where = "" if state.reachable else " (server unreachable: spooled runs only)"
        print(
            f"sweep {spec.name} on {env_label}: {len(plan)} run(s) planned, {n_done} already done{where}"
        )
        return 0
    print(
        f"sweep {spec.name} on {env_label}: {len(plan) // spec.repeats} configuration(s) x {spec.repeats} repeat(s)",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    outcomes = run_sweep(
        spec, experiment=args.experiment, env_label=env_label, progress=not args.no_progress
    )
    print(summary_table(outcomes))
    failed = [o for o in outcomes if o.status == "FAILED"]
    counts = {
        s: sum(o.status == s for o in outcomes)
        for s in ("FINISHED", "SKIPPED", "FAILED", "OFFLINE")
    }
    print(
        f"sweep {spec.name}: {counts['FINISHED']} finished, {counts['SKIPPED']} skipped (done before), "
        f"{counts['FAILED']} failed, {counts['OFFLINE']} kept offline, in {time.perf_counter() - t0:.0f} s"
    )
    for o in failed:
        print(f"  failed: {o.label}: {o.error}")
    if counts["OFFLINE"]:
        print(
            "  offline runs are in the spool: send them with `python -m common.upload` when the server is back"
        )
    # Offline is not a failure (the measurement is kept); exit 1 only when every run failed.
    return 1 if outcomes and len(failed) == len(outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
