"""Measuring: preflight, every model through train/complexity/footprint.py, then the RSS check (CPU)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common import envinfo
from common.errors import BenchError, UsageError, one_line
from train import device as dev
from train.complexity.config import ComplexityConfig
from train.config import TrainConfig
from train.models import check_image_size, check_model_name


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
    cfg.models = list(dict.fromkeys(check_model_name(m) for m in cfg.models))
    for model in cfg.models:  # inception_v3 below 299 px: one line, not a shape error mid-run
        check_image_size(model, cfg.image_size)
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

    t0 = time.perf_counter()
    if cfg.device_memory_bytes is not None:
        mem, source = cfg.device_memory_bytes, f"--device-memory {cfg.device_memory}"
    else:
        mem, source = dev.device_memory_bytes(device)
    result = ComplexityResult(cfg, str(device), envinfo.device_name(str(device)), mem, source, [])
    bar = tqdm(
        total=len(cfg.models), desc="complexity", unit="step", disable=not progress, leave=False
    )
    try:
        for name in cfg.models:
            bar.set_description(f"complexity {name}")
            result.models.append(_model(cfg, name, device))
            bar.update(1)
        result.rss_models = [c.model for c in cfg.rss_check_models(result.models, device)]
        # known once the models are measured
        bar.total += len(result.rss_models) * len(cfg.rss_batch_sizes)
        bar.refresh()
        for c in (c for c in result.models if c.model in result.rss_models):
            _rss_check(cfg, c, result, bar)
    finally:
        bar.close()
    result.wall_s = time.perf_counter() - t0
    return result


def _model(cfg: ComplexityConfig, name: str, device):
    """The ModelComplexity of model `name` (train/complexity/footprint.py)."""
    from train.complexity.footprint import analyze_model  # imports numpy: not on --help

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
        return analyze_model(tcfg, device)
    except (BenchError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - first execution of the model: one line, not a dump
        raise _runtime_error(exc, name, cfg, device) from exc


def _rss_check(cfg: ComplexityConfig, c, result: ComplexityResult, bar) -> None:
    """The RSS growth of one real step of model `c` at each RSS batch size, into `result` (a probe
    that fails is a note: the analysis stands; the check says what it could not measure)."""
    from train.complexity.rss_step import measure_step_rss  # imports numpy: not on --help

    sizes, notes = rss_batches(c, cfg.rss_batch_sizes)
    result.rss_notes += notes
    for b in sizes:
        bar.set_description(f"RSS {c.model} b{b}")
        try:
            result.rss.setdefault(c.model, []).append(
                measure_step_rss(
                    c.model, b, cfg.image_size, cfg.optimizer, cfg.precision, cfg.num_classes
                )
            )
        except BenchError as exc:
            result.rss_notes.append(f"{c.model} batch {b} not checked: {one_line(exc)}")
        bar.update(1)
    if not result.rss.get(c.model):
        result.rss.pop(c.model, None)


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
    if dev.is_out_of_memory(exc):
        return BenchError(
            f"out of memory measuring {name} at batch 1-4, {cfg.image_size}px on {device.type}: "
            "use a smaller --image-size"
        )
    return BenchError(
        f"{name} failed to train at {cfg.image_size}px, {cfg.precision} on {device.type}: {one_line(exc)}"
    )
