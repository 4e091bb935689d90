"""What a what-if reads from the tracking store, as plain data for roofline/whatif.py: the original
run and its configuration, the configuration's breakdown rows, the device's ceilings and its batch
series' fixed-time fit.

Every value read is untrusted (anyone can write a run to an unauthenticated server): a breakdown
row with a share, FLOPs or bytes that is not a finite number in range is left out with a line
naming it, as analysis/screen.py does for the runs the analysis reads; ceilings pass the bounds of
roofline/ceilings.py. A run that cannot be a what-if's original is refused in one line.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

import numpy as np

from common import plausible, schema
from common.errors import UsageError, one_line
from common.runs import all_experiment_ids, artifact_text, mlflow_client
from common.server import display_uri
from common.stats import as_float
from roofline.ceilings import measured_over_vendor, roof_from_vendor
from roofline.model import Roof
from roofline.whatif import BatchFit, Original, Row
from train.batch_fit import line, unfit
from train.config import TrainConfig, config_from_params, data_kind

KINDS = ("train", "breakdown")
"""the runs a what-if starts from: a train run, or a breakdown run (its params are the train
config's)"""
NEEDED_PARAMS = ("model", "batch_size", "precision", "image_size")
MAX_SERIES_RUNS = 500
"""the newest train runs of the batch series read for the fit"""


@dataclass
class Source:
    """The original and what the model of its moves rests on."""

    run_id: str
    run_kind: str
    cfg: TrainConfig
    device_name: str
    experiment_id: str
    original: Original
    duration_s: float | None
    """the original run's wall time (start to end): what the budget's estimates start from"""
    rows: list[Row] = field(default_factory=list)
    breakdown_run: str | None = None
    no_rows_why: str = ""
    roof: Roof | None = None
    fit: BatchFit | None = None
    notes: list[str] = field(default_factory=list)
    """what was left out or could not be had, one line each"""


def read(run_id: str, client=None) -> Source:
    """The original run `run_id` and everything its predictions rest on."""
    client = mlflow_client(client)
    run = _run(client, run_id)
    cfg = _config(run)
    tags, metrics = run.data.tags, run.data.metrics
    dev_name = tags.get(schema.TAG_DEVICE_NAME, "")
    info = run.info
    duration = (
        (info.end_time - info.start_time) / 1e3 if info.end_time and info.start_time else None
    )
    src = Source(
        run.info.run_id,
        tags[schema.TAG_RUN_KIND],
        cfg,
        dev_name,
        info.experiment_id,
        _original(cfg, tags, metrics),
        duration,
    )
    _add_breakdown(src, run, client)
    src.roof = ceilings(dev_name, cfg.env_label, client)
    src.fit = batch_fit(src, client)
    return src


def _run(client, run_id: str):
    try:
        run = client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - not found, a bad id, a store that is down: one line
        raise UsageError(
            f"no run {run_id!r} on {display_uri()} ({one_line(exc)[:120]}): give the id of a "
            "train or breakdown run (the run page's Run ID)"
        ) from None
    kind = run.data.tags.get(schema.TAG_RUN_KIND, "")
    if kind not in KINDS:
        raise UsageError(
            f"run {run_id} is a {kind or 'untagged'} run: a what-if starts from a train or "
            "breakdown run of the configuration"
        )
    if run.info.status != "FINISHED":
        raise UsageError(f"run {run_id} is {run.info.status}: a what-if starts from a finished run")
    return run


def _config(run) -> TrainConfig:
    """The run's configuration; refused in one line when the run lacks it or is data-parallel."""
    params, rid = run.data.params, run.info.run_id
    missing = [p for p in NEEDED_PARAMS if not params.get(p)]
    if missing:
        raise UsageError(
            f"run {rid} has no configuration to change (params {', '.join(missing)} missing): "
            "start from a run made by python -m train or python -m profiling --breakdown"
        )
    if schema.is_distributed(params):
        raise UsageError(
            f"run {rid} is a data-parallel run ({params.get('distributed')}): a what-if runs one "
            "process; start from a single-process run"
        )
    cfg = config_from_params(params)
    cfg.env_label = run.data.tags.get(schema.TAG_ENV_LABEL) or cfg.env_label
    if run.data.tags.get(schema.TAG_RUN_KIND) == "breakdown":  # its iters are recorded steps
        defaults = TrainConfig()
        cfg.iters, cfg.warmup_iters = defaults.iters, defaults.warmup_iters
    return cfg


def _original(cfg: TrainConfig, tags: dict, metrics: dict) -> Original:
    step = metrics.get("step_time_mean_s") or metrics.get(schema.BREAKDOWN_STEP_METRIC)
    params = metrics.get("params")
    return Original(
        device_type=tags.get(schema.TAG_DEVICE_TYPE, cfg.device.split(":")[0]),
        precision=cfg.precision,
        channels_last=cfg.channels_last,
        compile=cfg.compile,
        batch_size=cfg.batch_size,
        data_kind=data_kind(cfg.data),
        workers=cfg.workers,
        step_s=step if _usable(step, plausible_max=1e7) else None,
        params=params if _usable(params, plausible_max=1e13) else None,
    )


def _usable(x, plausible_max: float) -> bool:
    """A positive number (common.stats.as_float) no larger than `plausible_max`."""
    v = as_float(x, positive=True)
    return v is not None and v <= plausible_max


def _add_breakdown(src: Source, run, client) -> None:
    """The configuration's breakdown (the original itself, or the newest FINISHED breakdown run
    of its config_key on its device, its env label first) and its rows."""
    if src.run_kind == "breakdown":
        bd = run
    else:
        bd = find_breakdown(client, src.cfg, src.device_name)
    if bd is None:
        src.no_rows_why = (
            f"no breakdown run of {src.cfg.config_label()} on {src.device_name}: "
            f"`python -m profiling --breakdown {' '.join(_flags(src.cfg))}` measures one"
        )
        return
    src.breakdown_run = bd.info.run_id
    src.rows, dropped = breakdown_rows(client, bd.info.run_id)
    src.notes += dropped
    if not src.rows:
        src.no_rows_why = f"breakdown run {bd.info.run_id} has no usable rows in its layers.csv"


def _flags(cfg: TrainConfig) -> list[str]:
    out = [
        f"--model {cfg.model}",
        f"--batch {cfg.batch_size}",
        f"--precision {cfg.precision}",
        f"--image-size {cfg.image_size}",
        f"--device {cfg.device}",
    ]
    out += ["--channels-last"] if cfg.channels_last else []
    return out


def find_breakdown(client, cfg: TrainConfig, device_name: str):
    """The newest FINISHED breakdown run of `cfg`'s config_key on `device_name` in any experiment
    (those of cfg's env label first), or None."""
    exp_ids = all_experiment_ids(client)
    if not exp_ids:
        return None
    query = (
        f"tags.{schema.TAG_RUN_KIND} = 'breakdown' and attributes.status = 'FINISHED' and "
        f"tags.{schema.TAG_CONFIG_KEY} = '{cfg.config_key()}' and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(device_name, 'device name')}"
    )
    runs = client.search_runs(
        exp_ids, query, order_by=["attributes.start_time DESC"], max_results=50
    )
    mine = [r for r in runs if r.data.tags.get(schema.TAG_ENV_LABEL) == cfg.env_label]
    return (mine or runs or [None])[0]


def breakdown_rows(client, run_id: str) -> tuple[list[Row], list[str]]:
    """The rows of the breakdown run's layers.csv (common.schema.BREAKDOWN_ROW_FIELDS), and one
    line per row left out (a value that is no number in range) or per problem with the file."""
    try:
        text = artifact_text(run_id, schema.BREAKDOWN_LAYERS_ARTIFACT, client)
    except Exception as exc:  # noqa: BLE001 - no rows, said why
        return [], [f"breakdown run {run_id}: layers.csv could not be read ({one_line(exc)[:120]})"]
    return parse_rows(text, run_id)


def parse_rows(text: str, run_id: str = "") -> tuple[list[Row], list[str]]:
    """layers.csv text -> rows and the lines naming what was left out."""
    reader = csv.DictReader(io.StringIO(text))
    lacking = [f for f in schema.BREAKDOWN_ROW_FIELDS if f not in (reader.fieldnames or [])]
    if lacking:
        return [], [f"breakdown run {run_id}: layers.csv lacks the columns {', '.join(lacking)}"]
    rows, notes = [], []
    for i, rec in enumerate(reader):
        try:
            row = _row(rec)
        except ValueError as exc:
            notes.append(f"breakdown run {run_id}: layers.csv row {i + 2} left out: {exc}")
            continue
        rows.append(row)
    return rows, notes


def _row(rec: dict) -> Row:
    share = _number(rec["share"], "share", 1.0)
    flops = _number(rec["flops"] or "0", "flops", 1e18)
    nbytes = _number(rec["bytes"] or "0", "bytes", 1e18)
    leaf = str(rec["leaf"]).strip().lower() in ("true", "1")
    return Row(str(rec["module"]), str(rec["phase"]), str(rec["kind"]), leaf, share, flops, nbytes)


def _number(text: str, name: str, high: float) -> float:
    x = as_float(text, nonnegative=True)
    if x is None or x > high:
        raise ValueError(f"{name} {text!r} is not a number in [0, {high:g}]")
    return x


def ceilings(device_name: str, env_label: str, client=None) -> Roof | None:
    """The device's ceilings as a train run's roofline takes them: each the best of its most
    trusted peaks runs (roofline/store.py), the vendor table's for the others."""
    from roofline.store import measured_roof
    from roofline.vendor import load_vendor_lookup

    measured = measured_roof(device_name, env_label, client)
    vendor = roof_from_vendor(load_vendor_lookup()(device_name), device_name)
    return measured_over_vendor(measured, vendor)


def batch_fit(src: Source, client=None) -> BatchFit | None:
    """The fixed-time fit of the configuration's batch series (FINISHED train runs of the same
    env label, device and configuration but the batch; stable batch sizes only) where it holds
    (train/batch_fit.py), else None with a note."""
    client = mlflow_client(client)
    cfg = src.cfg
    query = (
        f"tags.{schema.TAG_RUN_KIND} = 'train' and attributes.status = 'FINISHED' and "
        f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(cfg.env_label, 'env label')} and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(src.device_name, 'device name')} "
        f"and params.model = {schema.filter_literal(cfg.model, 'model')}"
    )
    runs = client.search_runs(
        [src.experiment_id],
        query,
        order_by=["attributes.start_time DESC"],
        max_results=MAX_SERIES_RUNS,
    )
    groups: dict[int, list[float]] = {}
    for r in runs:
        p = r.data.params
        step = r.data.metrics.get("step_time_mean_s")
        if not _usable(step, 1e7) or schema.is_distributed(p):
            continue
        try:
            same = schema.config_key({**p, "batch_size": cfg.batch_size}) == cfg.config_key()
            batch = int(float(p["batch_size"]))
        except (KeyError, ValueError):
            continue
        if same:
            groups.setdefault(batch, []).append(step)
    return _fit(groups, cfg.batch_size, src)


def _fit(groups: dict[int, list[float]], batch: int, src: Source) -> BatchFit | None:
    stable = {b: s for b, s in groups.items() if max(s) / min(s) <= plausible.UNSTABLE_SPREAD}
    if len(stable) < 2:
        return None
    xy = np.array([(b, s) for b, steps in stable.items() for s in steps], dtype=float)
    fit = line(xy)
    means = {b: float(np.mean(s)) for b, s in stable.items()}
    why = unfit(fit, len(xy), list(means.values()))
    if why is not None:
        src.notes.append(
            f"batch series {sorted(stable)}: no fixed-time fit for the batch moves, {why}"
        )
        return None
    step = means.get(batch) or src.original.step_s
    if not step:
        return None
    return BatchFit(fit["fixed"], fit["ci"], step, tuple(sorted(stable)), int(fit["n"]))
