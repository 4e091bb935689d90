"""`python -m train.complexity`: what each model costs to train, per model and batch size.

Parameters, forward FLOPs/MACs, training FLOPs, modeled intensity, gradient and optimizer-state
bytes, activations saved for backward (per layer too), the predicted training memory per batch
size and the largest batch predicted to fit in the device's memory; on the CPU (by default for
the cheapest model, with --validate-rss true for all) the prediction checked against the RSS
growth of one real training step. All numbers come from
train/footprint.py, measured at two small batch sizes and scaled linearly.

Output: a `complexity` MLflow run (metrics `<model>/...`, CSV tables under `complexity/`), the
same tables as files with --out, and a Markdown summary on the console. See docs/complexity.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from common import console, schema
from common.cli import cli_entry
from common.errors import BenchError, UsageError, one_line
from common.cli import ArgumentParser, split_words, str_bool
from train.config import DEVICES, OPTIMIZERS

DEFAULT_MODELS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2")
DEFAULT_BATCH_SIZES = (16, 32, 64, 128)
DEFAULT_RSS_BATCH_SIZES = (2, 8)
ARTIFACT_DIR = "complexity"


@dataclass
class ComplexityConfig:
    """What to analyse. Field names are the MLflow param names of a `complexity` run."""

    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    """torchvision classifier names (torchvision.models.list_models)."""
    batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    """batch sizes to predict memory, FLOPs and intensity for (positive integers)."""
    image_size: int = 224
    """input height = width in pixels (>= 32)."""
    optimizer: str = "sgd"
    """sgd (momentum 0.9: one state tensor per parameter), adam or adamw (two each, plus a step counter)."""
    precision: str = "fp32"
    """fp32, or fp16/bf16 through torch.autocast, as in training runs."""
    device: str = "auto"
    """auto, cpu, cuda, cuda:N or mps: where the model is measured."""
    num_classes: int = 1000
    """classifier outputs."""
    device_memory: str | None = None
    """memory to fit the batch into, e.g. 16GiB, 16GB, 512MiB (default: the measured device's)."""
    validate_rss: bool | str = "auto"
    """compare the prediction with the RSS growth of one real step per --rss-batch-sizes (CPU only):
    auto = on the CPU, the model with the fewest training FLOPs per sample (the cheapest check), off
    elsewhere; true = every model (refused off the CPU); false = off."""
    rss_batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_RSS_BATCH_SIZES))
    """batch sizes of the RSS check (one fresh process each; keep them small)."""
    seed: int = 0
    """seed for weights and synthetic data."""
    env_label: str = field(default_factory=schema.default_env_label)
    """your name for this environment (default: host name)."""

    def __post_init__(self) -> None:
        from train.footprint import parse_bytes

        self.models = list(dict.fromkeys(str(m).strip() for m in self.models if str(m).strip()))
        if not self.models:
            raise ValueError("models must name at least one torchvision classifier")
        for name in ("batch_sizes", "rss_batch_sizes"):
            values = list(getattr(self, name))
            if not values or any(int(b) <= 0 for b in values):
                raise ValueError(
                    f"{name} must be positive integers, got {' '.join(str(b) for b in values) or 'none'}"
                )
            setattr(self, name, sorted({int(b) for b in values}))
        for name in ("image_size", "num_classes"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.image_size < 32:
            raise ValueError(f"image_size must be >= 32 pixels, got {self.image_size}")
        self.optimizer, self.precision, self.device = (
            self.optimizer.lower(),
            self.precision.lower(),
            self.device.lower(),
        )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if self.precision not in schema.PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(schema.PRECISIONS)}, got {self.precision!r}"
            )
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise ValueError(
                f"device must be one of {', '.join(DEVICES)} or cuda:N, got {self.device!r}"
            )
        self.validate_rss = _auto_bool(self.validate_rss)
        if self.device_memory is not None and str(self.device_memory).strip() == "":
            self.device_memory = None
        if self.device_memory is not None:
            try:
                parse_bytes(self.device_memory)
            except ValueError as exc:
                raise ValueError(f"device_memory: {exc}") from None
        if not self.env_label:
            self.env_label = schema.default_env_label()

    def rss_check_on(self, device) -> bool:
        """Whether the RSS check runs on `device` (auto: only on the CPU)."""
        if self.validate_rss == "auto":
            return device.type == "cpu"
        return bool(self.validate_rss)

    def rss_check_models(self, models, device) -> list:
        """The analysed models (ModelComplexity) whose prediction the RSS check measures on `device`.

        true: all of them. auto: on the CPU, the one with the fewest training FLOPs per sample, so
        that the default four models at 224 px stay well under two minutes (docs/complexity.md).
        """
        if not self.rss_check_on(device) or not models:
            return []
        if self.validate_rss == "auto":
            return [min(models, key=lambda c: c.train_flops_per_sample)]
        return list(models)

    @property
    def device_memory_bytes(self) -> int | None:
        from train.footprint import parse_bytes

        return parse_bytes(self.device_memory) if self.device_memory is not None else None

    def params(self) -> dict:
        return {
            "models": ",".join(self.models),
            "batch_sizes": ",".join(map(str, self.batch_sizes)),
            "image_size": self.image_size,
            "optimizer": self.optimizer,
            "precision": self.precision,
            "num_classes": self.num_classes,
            "validate_rss": str(self.validate_rss).lower(),
            "rss_batch_sizes": ",".join(map(str, self.rss_batch_sizes)),
            "seed": self.seed,
        }


def _auto_bool(value) -> bool | str:
    """ "auto" (or empty: the default) stays "auto"; true/false words become booleans."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("auto", ""):
        return "auto"
    try:
        return str_bool(text)
    except argparse.ArgumentTypeError:
        raise ValueError(f"validate_rss must be auto, true or false, got {value!r}") from None


# ------------------------------------------------------------------ CLI parsing
def _int_list(values, flag: str) -> list[int]:
    out = []
    for token in split_words(values):
        try:
            out.append(int(token))
        except ValueError:
            raise UsageError(f"{flag} takes whole numbers, got {token!r}") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m train.complexity",
        description="Parameters, FLOPs, activation memory and predicted training memory per model and batch "
        "size, measured at batch 1 and 2 and scaled linearly; logged as a `complexity` MLflow run.",
    )
    d = ComplexityConfig(env_label="x")
    p.add_argument(
        "--models",
        nargs="+",
        default=list(d.models),
        help="torchvision classifiers (space or comma separated)",
    )
    p.add_argument(
        "--batch-sizes",
        nargs="+",
        default=[str(b) for b in d.batch_sizes],
        help="batch sizes to predict for",
    )
    p.add_argument(
        "--image-size", type=int, default=d.image_size, help="input height and width (pixels)"
    )
    p.add_argument("--optimizer", default=d.optimizer, help="sgd (momentum 0.9), adam or adamw")
    p.add_argument("--precision", default=d.precision, help="fp32, bf16 or fp16 (autocast)")
    p.add_argument(
        "--device", default=d.device, help="auto | cpu | cuda | cuda:N | mps (where to measure)"
    )
    p.add_argument("--num-classes", type=int, default=d.num_classes, help="classifier outputs")
    p.add_argument(
        "--device-memory",
        default=None,
        help="memory to fit into, e.g. 16GiB (2^30), 16GB (10^9), 512MiB; default: the device's "
        "(CUDA total memory; CPU: available RAM)",
    )
    p.add_argument(
        "--validate-rss",
        nargs="?",
        const="true",
        default="auto",
        metavar="{auto,true,false}",
        help="check the prediction against the RSS growth of one real step (fresh process per model and "
        "batch); auto (default) = on for --device cpu, off elsewhere; false turns it off",
    )
    p.add_argument(
        "--rss-batch-sizes",
        nargs="+",
        default=[str(b) for b in d.rss_batch_sizes],
        help="batch sizes of the RSS check",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--env-label", default=None, help="name of this environment (default: host name)"
    )
    p.add_argument(
        "--experiment",
        default=None,
        help="MLflow experiment name (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    p.add_argument(
        "--out", default=None, help="also write the tables (CSV, Markdown) into this folder"
    )
    p.add_argument(
        "--no-track", action="store_true", help="do not log an MLflow run (print, and write --out)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args: argparse.Namespace) -> ComplexityConfig:
    kwargs = {
        f.name: getattr(args, f.name)
        for f in fields(ComplexityConfig)
        if getattr(args, f.name, None) is not None
    }
    kwargs["models"] = split_words(args.models)
    kwargs["batch_sizes"] = _int_list(args.batch_sizes, "--batch-sizes")
    kwargs["rss_batch_sizes"] = _int_list(args.rss_batch_sizes, "--rss-batch-sizes")
    try:
        return ComplexityConfig(**kwargs)
    except ValueError as exc:
        raise UsageError(_flag_message(str(exc))) from None


def _flag_message(text: str) -> str:
    """'batch_sizes must ...' -> '--batch-sizes must ...' (the user typed flags)."""
    m = re.match(r"^(\w+)(:?\s)(.*)$", text)
    if m and m.group(1) in {f.name for f in fields(ComplexityConfig)}:
        return f"--{m.group(1).replace('_', '-')}{m.group(2)}{m.group(3)}"
    return text


# ------------------------------------------------------------------ measuring
@dataclass
class ComplexityResult:
    """Everything the run logs, as plain data."""

    cfg: ComplexityConfig
    device: str
    device_name: str
    device_memory_bytes: int
    device_memory_source: str
    models: list  # ModelComplexity, in the order asked
    rss: dict = field(default_factory=dict)  # model -> list[RssMeasurement]
    rss_models: list = field(
        default_factory=list
    )  # models the RSS check measured (see rss_check_models)
    rss_notes: list = field(
        default_factory=list
    )  # RSS batches replaced or not measured, one line each
    wall_s: float = 0.0


def preflight(cfg: ComplexityConfig):
    """Cheap checks before any run is created: model names, device, precision, RSS on CPU only."""
    from train import device as dev
    from train.models import check_model_name

    cfg.models = list(dict.fromkeys(check_model_name(m) for m in cfg.models))
    device = dev.resolve_device(cfg.device)
    dev.check_precision(cfg.precision, device)
    if cfg.validate_rss is True and device.type != "cpu":
        raise UsageError(
            f"--validate-rss measures this process's RSS and needs --device cpu (got {device.type}); "
            "leave it at auto or false"
        )
    return device


def measure(cfg: ComplexityConfig, device, progress: bool = True) -> ComplexityResult:
    """Measure every model of `cfg` on `device`, then (CPU, unless turned off) the RSS check.

    The RSS check never discards the analysis: a batch size the model cannot train at is replaced
    (see `rss_batches`) and a probe that fails becomes a note in `result.rss_notes`.
    """
    from tqdm import tqdm

    from common import envinfo
    from train.config import TrainConfig
    from train.footprint import analyze_model, device_memory_bytes, measure_step_rss

    t0 = time.perf_counter()
    if cfg.device_memory_bytes is not None:
        mem, source = cfg.device_memory_bytes, f"--device-memory {cfg.device_memory}"
    else:
        mem, source = device_memory_bytes(device)
    result = ComplexityResult(cfg, str(device), envinfo.device_name(str(device)), mem, source, [])
    bar = tqdm(
        total=len(cfg.models), desc="complexity", unit="step", disable=not progress, leave=False
    )
    try:
        for name in cfg.models:
            bar.set_description(f"complexity {name}")
            tcfg = TrainConfig(
                model=name,
                image_size=cfg.image_size,
                precision=cfg.precision,
                device=str(device),
                optimizer=cfg.optimizer,
                num_classes=cfg.num_classes,
                seed=cfg.seed,
                data="synthetic",
                env_label=cfg.env_label,
            )
            try:
                result.models.append(analyze_model(tcfg, device))
            except (BenchError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - first execution of the model: one line, not a dump
                raise _runtime_error(exc, name, cfg, device) from exc
            bar.update(1)
        result.rss_models = [c.model for c in cfg.rss_check_models(result.models, device)]
        bar.total += len(result.rss_models) * len(
            cfg.rss_batch_sizes
        )  # known once the models are measured
        bar.refresh()
        for c in (c for c in result.models if c.model in result.rss_models):
            sizes, notes = rss_batches(c, cfg.rss_batch_sizes)
            result.rss_notes += notes
            for b in sizes:
                bar.set_description(f"RSS {c.model} b{b}")
                try:
                    result.rss.setdefault(c.model, []).append(
                        measure_step_rss(
                            c.model,
                            b,
                            cfg.image_size,
                            cfg.optimizer,
                            cfg.precision,
                            cfg.num_classes,
                        )
                    )
                except (
                    BenchError
                ) as exc:  # the analysis stands; the check says what it could not measure
                    result.rss_notes.append(f"{c.model} batch {b} not checked: {one_line(exc)}")
                bar.update(1)
            if not result.rss.get(c.model):
                result.rss.pop(c.model, None)
    finally:
        bar.close()
    result.wall_s = time.perf_counter() - t0
    return result


def rss_batches(c, requested: list[int]) -> tuple[list[int], list[str]]:
    """The RSS check's batch sizes for model `c`, and a note for each size it had to replace.

    A model whose batch norm cannot train on one sample (analyze_model measured it at 2 and 4
    instead of 1 and 2) would fail at batch 1 ("Expected more than 1 value per channel"): like
    analyze_model, it moves to the smallest power of two >= 2 that is not already checked.
    """
    smallest = min(c.measured_batches)
    if smallest <= 1:
        return list(requested), []
    sizes = [b for b in requested if b >= smallest]
    notes = []
    for b in (b for b in requested if b < smallest):
        sub = next(k for k in (2**i for i in range(1, 64)) if k >= smallest and k not in sizes)
        sizes.append(sub)
        notes.append(
            f"{c.model} batch {b} checked at batch {sub} instead: its batch norm cannot train on "
            f"{b} sample(s) at {c.image_size} px (a 1x1 feature map)"
        )
    return sorted(sizes), notes


def _runtime_error(exc: BaseException, name: str, cfg: ComplexityConfig, device) -> BenchError:
    from train import device as dev

    if dev.is_out_of_memory(exc):
        return BenchError(
            f"out of memory measuring {name} at batch 1-4, {cfg.image_size}px on {device.type}: "
            "use a smaller --image-size"
        )
    return BenchError(
        f"{name} failed to train at {cfg.image_size}px, {cfg.precision} on {device.type}: {one_line(exc)}"
    )


# ------------------------------------------------------------------ tables (pure: rows and strings)
MODEL_COLUMNS = (
    "model",
    "image_size",
    "precision",
    "optimizer",
    "num_classes",
    "params",
    "param_bytes",
    "buffer_bytes",
    "weight_bytes",
    "grad_bytes",
    "optimizer_state_bytes",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "train_flops_per_sample",
    "activation_bytes_per_sample",
    "activation_fixed_bytes",
    "fixed_bytes",
    "modeled_bytes_per_sample",
    "modeled_fixed_bytes",
    "modeled_intensity_limit_flops_per_byte",
    "device_memory_bytes",
    "max_batch_fit",
    "measured_batches",
)
BATCH_COLUMNS = (
    "model",
    "batch_size",
    "activation_bytes",
    "predicted_train_mem_bytes",
    "fits",
    "train_flops_per_step",
    "modeled_bytes_per_step",
    "modeled_intensity_flops_per_byte",
)
LAYER_COLUMNS = (
    "name",
    "type",
    "output_shape",
    "params",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "saved_bytes_per_sample",
    "saved_fixed_bytes",
)
RSS_COLUMNS = (
    "model",
    "batch_size",
    "rss_before_bytes",
    "peak_rss_bytes",
    "measured_growth_bytes",
    "predicted_growth_bytes",
    "rel_error",
    "peak_source",
)


def model_rows(result: ComplexityResult) -> list[dict]:
    rows = []
    for c in result.models:
        rows.append(
            {
                "model": c.model,
                "image_size": c.image_size,
                "precision": c.precision,
                "optimizer": c.optimizer,
                "num_classes": c.num_classes,
                "params": c.params,
                "param_bytes": c.param_bytes,
                "buffer_bytes": c.buffer_bytes,
                "weight_bytes": c.weight_bytes,
                "grad_bytes": c.grad_bytes,
                "optimizer_state_bytes": c.optimizer_state_bytes,
                "fwd_flops_per_sample": c.fwd_flops_per_sample,
                "fwd_macs_per_sample": c.fwd_macs_per_sample,
                "train_flops_per_sample": c.train_flops_per_sample,
                "activation_bytes_per_sample": c.activation_bytes_per_sample,
                "activation_fixed_bytes": c.activation_fixed_bytes,
                "fixed_bytes": c.fixed_bytes,
                "modeled_bytes_per_sample": c.modeled_bytes_per_sample,
                "modeled_fixed_bytes": c.modeled_fixed_bytes,
                "modeled_intensity_limit_flops_per_byte": c.modeled_intensity_limit_flops_per_byte,
                "device_memory_bytes": result.device_memory_bytes,
                "max_batch_fit": c.max_batch_fit(result.device_memory_bytes),
                "measured_batches": " ".join(map(str, c.measured_batches)),
            }
        )
    return rows


def batch_rows(result: ComplexityResult) -> list[dict]:
    rows = []
    for c in result.models:
        for b in result.cfg.batch_sizes:
            counts = c.step_counts(b)
            mem = c.predicted_train_mem_bytes(b)
            rows.append(
                {
                    "model": c.model,
                    "batch_size": b,
                    "activation_bytes": c.activation_bytes(b),
                    "predicted_train_mem_bytes": mem,
                    "fits": mem <= result.device_memory_bytes,
                    "train_flops_per_step": counts.train_flops,
                    "modeled_bytes_per_step": counts.modeled_bytes,
                    "modeled_intensity_flops_per_byte": counts.modeled_intensity_flops_per_byte,
                }
            )
    return rows


def layer_rows(c) -> list[dict]:
    return [{k: getattr(row, k) for k in LAYER_COLUMNS} for row in c.layers]


def rss_rows(result: ComplexityResult) -> list[dict]:
    from train.footprint import predicted_step_growth_bytes

    by_name = {c.model: c for c in result.models}
    rows = []
    for name, measurements in result.rss.items():
        for r in measurements:
            pred = predicted_step_growth_bytes(by_name[name], r.batch_size)
            rows.append(
                {
                    "model": name,
                    "batch_size": r.batch_size,
                    "rss_before_bytes": r.rss_before_bytes,
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "measured_growth_bytes": r.growth_bytes,
                    "predicted_growth_bytes": pred,
                    "rel_error": (pred - r.growth_bytes) / r.growth_bytes,
                    "peak_source": r.peak_source,
                }
            )
    return rows


def to_csv(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _csv_value(row[k]) for k in columns})
    return buf.getvalue()


def _csv_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def metrics(result: ComplexityResult) -> dict[str, float]:
    """The run's metrics: `<model>/<name>` per model, `<model>/b<batch>/<name>` per batch."""
    out: dict[str, float] = {
        "device_memory_bytes": float(result.device_memory_bytes),
        "wall_s": result.wall_s,
    }
    per_model = (
        "params",
        "param_bytes",
        "buffer_bytes",
        "grad_bytes",
        "optimizer_state_bytes",
        "fwd_flops_per_sample",
        "fwd_macs_per_sample",
        "train_flops_per_sample",
        "activation_bytes_per_sample",
        "activation_fixed_bytes",
        "fixed_bytes",
        "modeled_intensity_limit_flops_per_byte",
        "max_batch_fit",
    )
    for row in model_rows(result):
        m = schema.sanitize_key(row["model"])
        out.update({f"{m}/{k}": float(row[k]) for k in per_model})
    for row in batch_rows(result):
        m, b = schema.sanitize_key(row["model"]), row["batch_size"]
        for k in (
            "predicted_train_mem_bytes",
            "activation_bytes",
            "train_flops_per_step",
            "modeled_intensity_flops_per_byte",
        ):
            out[f"{m}/b{b}/{k}"] = float(row[k])
    for row in rss_rows(result):
        m, b = schema.sanitize_key(row["model"]), row["batch_size"]
        for k in ("measured_growth_bytes", "predicted_growth_bytes", "rel_error"):
            out[f"{m}/rss_b{b}/{k}"] = float(row[k])
    return {k: v for k, v in out.items() if v == v}  # MLflow rejects nothing, but NaN helps nobody


def markdown(result: ComplexityResult) -> str:
    """The console summary: one row per model, predicted memory per batch size."""
    from train.footprint import format_bytes

    cfg = result.cfg
    gib = 2**30
    mem_txt = format_bytes(result.device_memory_bytes)
    batches = measured_batches_text(result.models)
    head = (
        f"Per-sample quantities measured at batch {batches} on {result.device} ({result.device_name}) and scaled linearly to each batch "
        f"({cfg.precision}, {cfg.image_size} px, {cfg.optimizer}). Predicted training memory = weights + gradients "
        f"+ optimizer state + activations (GiB; `over` = more than {mem_txt}, {result.device_memory_source})."
    )
    cols = [
        "model",
        "params (M)",
        "fwd GFLOP/sample",
        "train GFLOP/sample",
        "weights+grads+opt MiB",
        "activations MiB/sample",
        *[f"b{b} GiB" for b in cfg.batch_sizes],
        f"max batch ({mem_txt})",
    ]
    lines = [
        head,
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|",
    ]
    for c in result.models:
        cells = [
            c.model,
            f"{c.params / 1e6:.2f}",
            f"{c.fwd_flops_per_sample / 1e9:.2f}",
            f"{c.train_flops_per_sample / 1e9:.2f}",
            f"{(c.weight_bytes + c.grad_bytes + c.optimizer_state_bytes) / 2**20:.1f}",
            f"{c.activation_bytes_per_sample / 2**20:.2f}",
        ]
        for b in cfg.batch_sizes:
            mem = c.predicted_train_mem_bytes(b)
            cells.append(
                f"{mem / gib:.2f}" + ("" if mem <= result.device_memory_bytes else " over")
            )
        cells.append(str(c.max_batch_fit(result.device_memory_bytes)))
        lines.append("| " + " | ".join(cells) + " |")
    rss = rss_rows(result)
    if rss:
        scope = (
            f"auto: {', '.join(result.rss_models)} only, the model with the fewest training FLOPs per sample; "
            "--validate-rss true checks every model"
            if cfg.validate_rss == "auto"
            else "every model"
        )
        lines += [
            "",
            f"RSS check (CPU, {scope}): growth of one real first training step in a fresh process vs the "
            "prediction (gradients + optimizer state + activations; the weights exist before the step).",
            "",
            "| model | batch | measured MiB | predicted MiB | error |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in rss:
            lines.append(
                f"| {r['model']} | {r['batch_size']} | {r['measured_growth_bytes'] / 2**20:.1f} | "
                f"{r['predicted_growth_bytes'] / 2**20:.1f} | {r['rel_error']:+.1%} |"
            )
    if result.rss_notes:
        lines += ["", "RSS check notes:", *(f"- {note}" for note in result.rss_notes)]
    return "\n".join(lines) + "\n"


def measured_batches_text(models) -> str:
    """'1 and 2', or '1 and 2 (2 and 4 for resnet18)' when some models had to be measured elsewhere."""

    def pair(c):
        return " and ".join(map(str, c.measured_batches))

    groups: dict[str, list[str]] = {}
    for c in models:
        groups.setdefault(pair(c), []).append(c.model)
    if not groups:
        return "-"
    common = max(groups, key=lambda k: len(groups[k]))
    others = [f"{k} for {', '.join(v)}" for k, v in groups.items() if k != common]
    return common + (f" ({'; '.join(others)})" if others else "")


def artifacts(result: ComplexityResult) -> dict[str, str]:
    """Artifact path -> text. `complexity/models.csv` is the stable per-model table analysis reads."""
    out = {
        f"{ARTIFACT_DIR}/models.csv": to_csv(model_rows(result), MODEL_COLUMNS),
        f"{ARTIFACT_DIR}/batches.csv": to_csv(batch_rows(result), BATCH_COLUMNS),
        f"{ARTIFACT_DIR}/summary.md": markdown(result),
    }
    for c in result.models:
        out[f"{ARTIFACT_DIR}/layers/{_file_name(c.model)}.csv"] = to_csv(
            layer_rows(c), LAYER_COLUMNS
        )
    if result.rss:
        out[f"{ARTIFACT_DIR}/rss_validation.csv"] = to_csv(rss_rows(result), RSS_COLUMNS)
    return out


def _file_name(model: str) -> str:
    return re.sub(r"[^\w.\-]", "_", model)


def summary_line(result: ComplexityResult) -> str:
    from train.footprint import format_bytes

    fits = ", ".join(
        f"{c.model} {c.max_batch_fit(result.device_memory_bytes)}" for c in result.models
    )
    line = (
        f"measured {len(result.models)} model(s) in {result.wall_s:.1f} s on {result.device}; "
        f"largest batch predicted to fit {format_bytes(result.device_memory_bytes)}: {fits}"
    )
    rss = rss_rows(result)
    if rss:
        worst = max(rss, key=lambda r: abs(r["rel_error"]))
        line += f"; RSS check worst error {worst['rel_error']:+.1%} ({worst['model']} b{worst['batch_size']})"
    if result.rss_notes:
        line += f"; {len(result.rss_notes)} RSS check note(s) above"
    return line


# ------------------------------------------------------------------ entry point
def run(
    cfg: ComplexityConfig,
    *,
    experiment: str | None = None,
    progress: bool = True,
    track: bool = True,
    out_dir: str | None = None,
    quiet: bool = False,
):
    """Preflight, measure, log a `complexity` run (unless track=False) and write --out files.

    Returns (session or None, result). Bad input raises UsageError before any run exists; a failure
    while measuring ends the run FAILED with the reason and is re-raised.
    """
    device = preflight(cfg)
    if not track:
        result = measure(cfg, device, progress)
        _write_out(out_dir, artifacts(result))
        return None, result
    from common.envinfo import environment_report, environment_tags
    from common.tracking import RunSession

    session = RunSession(
        "complexity",
        experiment=experiment,
        run_name=f"complexity-{cfg.image_size}px-{device.type}",
        tags=environment_tags(str(device), cfg.env_label),
    )
    with console.quiet(quiet), session:
        session.log_params({**cfg.params(), "device": str(device)})
        session.set_tags({schema.TAG_INTENSITY_SOURCE: "modeled"})
        session.flush()
        result = measure(cfg, device, progress)
        session.log_params(
            {
                "device_memory_bytes": result.device_memory_bytes,
                "device_memory_source": result.device_memory_source,
                "rss_models": ",".join(result.rss_models) or "none",
            }
        )
        session.log_metrics(metrics(result))
        if result.rss_notes:
            session.set_tags({"rss_notes": "; ".join(result.rss_notes)[:5000]})
        texts = artifacts(result)
        for path, text in texts.items():
            session.log_text(path, text)
        session.log_text("environment.txt", environment_report())
        _write_out(out_dir, texts)
    return session, result


def _write_out(out_dir: str | None, texts: dict[str, str]) -> None:
    if not out_dir:
        return
    root = Path(out_dir)
    for path, text in texts.items():
        dest = root / Path(path).relative_to(ARTIFACT_DIR)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    if not args.no_track:
        preflight(
            cfg
        )  # bad names/devices: one line, nothing logged (cli_entry fails an mlflow-run run)
    session, result = run(
        cfg,
        experiment=args.experiment,
        progress=not args.no_progress,
        track=not args.no_track,
        out_dir=args.out,
    )
    print(markdown(result))
    line = summary_line(result)
    if session is not None:
        line += (
            f"; kept offline in {session.spool_path}"
            if session.offline
            else f"; run {session.run_id}"
        )
    print(line)
    if session is not None and not session.offline:
        from common.server import ui_hint

        print(ui_hint(session.run_id, session.experiment_id))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    raise SystemExit(main())
