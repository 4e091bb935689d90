"""The benchmark: prepare a config, count its work, warm up, measure, and summarise.

A train run's record is plain data: its header (TrainConfig.header: params and tags, known before
anything is measured) and `run_benchmark`'s `BenchResult` made here (tags, metrics, series and
texts); `train.run.run` (train/run.py) only opens a `common.tracking.RunSession` and logs them. Profile mode
(train/profile_mode.py) reuses the same preparation and the same `train_step`. The single-process
and the distributed benchmark (train/distributed/measure.py) share its steps (setup, warm_up,
measure_steps, bench_result); the counting, timing and data code is in train/flops.py,
train/timing.py and train/data.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager

from common import schema
from common.envinfo import environment_report
from common.load import LoadSampler
from common.errors import BenchError, one_line
from train import device as dev
from train import energy, memory_check
from train import flops as fl
from train.config import TrainConfig
from train.data import BatchSource, check_data, open_source, synthetic_source
from train.models import build_model, check_image_size, check_model_name
from train.step import StepParts, aux_heads, make_optimizer, train_step
from train.timing import ci95_half_width_rel, make_clock, measure, measure_until, summarize

COUNT_BATCHES = (
    2,
    4,
)  # counts are taken at these batch sizes and extrapolated (see train/flops.py)


@dataclass
class Prepared:
    cfg: TrainConfig
    device: object
    model: object
    parts: StepParts
    source: BatchSource
    fp32_math: str | None = None
    """CUDA: the fp32 math in force (device.set_fp32_math), logged as tag fp32_math; None elsewhere."""
    aux_heads: dict[str, float] = field(default_factory=dict)
    """auxiliary heads the model's output carries and their loss weights (train.step.aux_heads),
    seen in the first counted step"""

    def step(self) -> None:
        train_step(self.parts, *self.source.next())


@dataclass
class BenchResult:
    """What a train run logs once it has measured (docs/schema.md)."""

    metrics: dict[str, float]
    step_times_s: list[float]
    texts: dict[str, str] = field(default_factory=dict)
    """artifact path -> text"""
    tags: dict[str, str] = field(default_factory=dict)
    """data_description, measure_stop (fixed | converged | max_iters | max_time)"""
    params: dict = field(default_factory=dict)
    """params known once measured (a distributed run's `nodes`)"""
    more_series: dict[str, list[float]] = field(default_factory=dict)
    """metric histories besides the step times (a distributed run's compute-only steps)"""

    @property
    def series(self) -> dict[str, list[float]]:
        """metric histories: name -> one value per step"""
        return {schema.STEP_SERIES: self.step_times_s, **self.more_series}


def step_times_csv(step_times_s: list[float]) -> str:
    """Every measured step time, exactly (the metric history keeps at most 1,000 points)."""
    return "step,step_time_s\n" + "".join(f"{i},{t!r}\n" for i, t in enumerate(step_times_s))


def preflight(cfg: TrainConfig):
    """Cheap checks before a run is created: model name, device, precision, data path; a
    distributed config's backend is resolved (auto -> nccl or gloo)."""
    cfg.model = check_model_name(cfg.model)
    check_image_size(cfg.model, cfg.image_size)
    device = dev.resolve_device(cfg.device)
    dev.check_precision(cfg.precision, device)
    if cfg.is_distributed:
        cfg.backend = dev.collective_backend(cfg.backend, device)
    classes = check_data(cfg.data)
    if classes is not None:
        cfg.num_classes = classes

    memory_check.check_weights(cfg, device)  # a model that cannot fit, said before its run exists
    return device


def prepare(cfg: TrainConfig, device) -> Prepared:
    """Data source, model, optimizer and step parts for `cfg` on `device` (cfg.num_classes is
    updated from the data set)."""
    import torch

    torch.manual_seed(cfg.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as real training does; autotuning happens in warmup
    fp32_math = dev.set_fp32_math(cfg.precision, device)
    source = open_source(cfg, device)
    if source.num_classes != cfg.num_classes:
        raise BenchError(
            f"data set has {source.num_classes} classes but {cfg.num_classes} were expected from its folders"
        )
    model = build_model(cfg.model, cfg.num_classes, cfg.image_size).to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr)
    parts = StepParts(
        model,
        optimizer,
        dev.autocast_context(cfg.precision, device),
        dev.grad_scaler(cfg.precision, device),
    )
    return Prepared(cfg, device, model, parts, source, fp32_math)


def compile_model(model):
    """`torch.compile(model)` from a fresh dynamo cache (`torch._dynamo.reset()`).

    Dynamo counts recompilations of one code object (ResNet.forward for every ResNet) for the whole
    process, and past `torch._dynamo.config.recompile_limit` (8) it runs that code eagerly with only
    a log line: the later configurations of a sweep (one process) would be logged compile=true and
    measured eager.
    """
    import torch

    torch._dynamo.reset()
    return torch.compile(model)


def count_steps(
    prep: Prepared, sizes: tuple[int, ...], around: Callable[[int], ContextManager] | None = None
) -> tuple[dict[int, fl.StepCounts], dict]:
    """Counted training steps of `prep` at each batch size in `sizes` (synthetic batches).

    One uncounted step runs first: the optimizer's first step creates its state (SGD clones the
    gradients into momentum buffers), which later steps update in place instead. `around(batch)`
    gives a context to hold open during that batch's counted step (the complexity command records
    saved tensors there). Returns the counts and the batches {size: (inputs, targets)}.
    """
    cfg = prep.cfg
    batches = {
        b: synthetic_source(
            b, cfg.image_size, cfg.num_classes, prep.device, cfg.channels_last, cfg.seed
        ).next()
        for b in sizes
    }
    # the first step: uncounted; what the model's output carries besides its logits is seen here
    seen = prep.model.register_forward_hook(
        lambda _m, _i, out: prep.aux_heads.update(aux_heads(out))
    )
    try:
        train_step(prep.parts, *batches[sizes[0]])
    finally:
        seen.remove()
    counts = {}
    for b, (x, y) in batches.items():
        with around(b) if around is not None else contextlib.nullcontext():
            counts[b] = fl.count_step(lambda: train_step(prep.parts, x, y), b)
    return counts, batches


def count_work(prep: Prepared) -> tuple[fl.StepCounts, fl.ForwardProfile]:
    """Training FLOPs and modeled bytes per step, and DeepSpeed's forward profile (untimed).

    Runs real steps at small batch sizes on the benchmark's device with the benchmark's model,
    precision and memory format, before any compilation; refuses a batch whose activations would
    not fit in the device's free memory (train/memory_check.py).
    """
    cfg = prep.cfg
    sizes = (cfg.batch_size,) if cfg.batch_size in COUNT_BATCHES else COUNT_BATCHES
    around, saved = memory_check.recorders(prep.model, sizes)
    counts, batches = count_steps(prep, sizes, around if memory_check.enabled() else None)
    # before the real batch runs: will its activations fit? (train/memory_check.py)
    memory_check.check(cfg, prep.device, {b: r.result().total_bytes for b, r in saved.items()})
    step_counts = (
        counts[cfg.batch_size]
        if cfg.batch_size in counts
        else fl.extrapolate(counts[2], counts[4], cfg.batch_size)
    )
    forward = fl.deepspeed_forward_profile(prep.model, batches[sizes[-1]][0])
    return step_counts, forward


@dataclass
class Measured:
    """The measured steps of one phase, on this process."""

    times: list[float]
    stop: str
    """fixed | converged | max_iters | max_time"""
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    load: dict[str, float] = field(default_factory=dict)
    """the machine's load over the steps (common.load: load_average_1m_start, _max, cpu_count)"""


@contextlib.contextmanager
def runtime_errors(cfg: TrainConfig, device):
    """Inside the block, a failure of the model's allocation or execution becomes a one-line
    BenchError (out of memory says so); BenchError and interrupts pass unchanged."""
    try:
        yield
    except (BenchError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - report, don't dump
        raise _runtime_error(exc, cfg, device) from exc


def setup(cfg: TrainConfig, device) -> tuple[Prepared, fl.StepCounts, fl.ForwardProfile, float]:
    """`prepare` and `count_work`: the prepared step, its counts, DeepSpeed's forward profile and
    the seconds counting took (inside the caller's `runtime_errors`)."""
    wall0 = time.perf_counter()
    prep = prepare(cfg, device)
    counts, forward = count_work(prep)
    return prep, counts, forward, time.perf_counter() - wall0


def warm_up(prep: Prepared, steps: int, bar) -> float | None:
    """`steps` untimed steps; returns the last one's seconds (device-synchronised), None for 0."""
    last_s = None
    for _ in range(steps):
        t0 = time.perf_counter()
        prep.step()
        dev.synchronize(prep.device)
        last_s = time.perf_counter() - t0
        bar.update(1)
    return last_s


def measure_steps(
    prep: Prepared, bar, what: str = "measure", times: list[float] | None = None
) -> Measured:
    """The measured steps of `prep.cfg` (a fixed number, or until converged with iters=auto), each
    timed between two device-synchronised clock reads (train.timing); CPU and wall time around
    them. `times`: a list each step time is appended to as it is measured (kept when interrupted)."""
    cfg, device = prep.cfg, prep.device
    clock = make_clock(lambda: dev.synchronize(device))
    dev.synchronize(device)
    with LoadSampler() as load:
        cpu0 = dev.cpu_times_s()
        t0 = time.perf_counter()
        bar.set_description(f"{cfg.model} b{cfg.batch_size} {what}")
        times, stop = _timed_steps(prep, bar, clock, times)
        wall_s = time.perf_counter() - t0
        cpu1 = dev.cpu_times_s()
    return Measured(times, stop, wall_s, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], load=load.metrics())


def _timed_steps(prep: Prepared, bar, clock, times) -> tuple[list[float], str]:
    """measure_steps' steps of `prep.cfg`: (step times, why measuring stopped)."""
    cfg = prep.cfg
    if cfg.iters == "auto":
        return measure_until(
            prep.step,
            clock,
            target_rel=cfg.ci_target,
            max_iters=cfg.max_iters,
            max_time_s=cfg.max_time_s,
            times=times,
            on_step=lambda i, dt, rel: (
                bar.update(1),
                bar.set_postfix_str(f"{dt * 1e3:.1f} ms/step, CI ±{rel:.1%}"),
            ),
        )
    on_step = lambda i, dt: (bar.update(1), bar.set_postfix_str(f"{dt * 1e3:.1f} ms/step"))  # noqa: E731
    return measure(prep.step, cfg.iters, clock, on_step=on_step, times=times), "fixed"


def run_benchmark(
    cfg: TrainConfig,
    device,
    progress: bool = True,
    step_times: list[float] | None = None,
    on_measure: Callable[[float | None], None] | None = None,
) -> BenchResult:
    """Prepare, count, warm up and measure `cfg` on `device`. Raises BenchError on user-facing failures.

    `step_times`: a list the measured step times are appended to as they are measured, so that a
    caller keeps them when the measurement is interrupted (SIGTERM, Ctrl-C) or fails mid-way.
    `on_measure(expected_s)` is called once warmup is over, just before the measured steps, with
    how long they are expected to last (the last warmup step's time x the steps; None without
    warmup): train.run.run starts its system metrics there. One `runtime_errors` block holds it
    all, preparation to the last measured step."""
    with runtime_errors(cfg, device):
        prep, counts, forward, count_s = setup(cfg, device)
        if cfg.compile:
            prep.parts.model = compile_model(prep.model)
        dev.reset_peak_memory(device)
        with progress_bar(cfg, progress) as bar:
            last_warmup_s = warm_up(prep, cfg.warmup_iters, bar)
            if on_measure is not None:  # the measured steps' expected seconds (None: unknown)
                s, expected = last_warmup_s, None
                if s is not None:
                    auto = cfg.iters == "auto"
                    expected = min(cfg.max_time_s, cfg.max_iters * s) if auto else cfg.iters * s
                on_measure(expected)
            with energy.meter_for(device) as meter:  # energy and NVML samples (train/energy.py)
                measured = measure_steps(prep, bar, times=step_times)
    result = bench_result(prep, counts, forward, measured, count_s)
    meter.add_to(result, len(measured.times) * cfg.batch_size)
    return result


def bench_result(
    prep: Prepared,
    counts: fl.StepCounts,
    forward: fl.ForwardProfile,
    measured: Measured,
    count_s: float,
    samples_per_step: int | None = None,
) -> BenchResult:
    """The run record of measured steps: summary statistics, work per step and per sample, memory,
    CPU and wall time, artifacts. `samples_per_step` (default: the batch) is what throughput counts:
    a distributed run's global batch. Memory figures are this process's."""
    cfg, times = prep.cfg, measured.times
    metrics = summarize(times, samples_per_step or cfg.batch_size)
    metrics.update(
        measured_iters=float(len(times)),
        fwd_flops_per_sample=forward.flops_per_sample,
        fwd_macs_per_sample=forward.macs_per_sample,
        params=float(forward.params),
        train_flops_per_step=counts.train_flops,
        train_flops_per_sample=counts.train_flops / cfg.batch_size,
        achieved_flops_per_s=schema.rate_per_s(counts.train_flops, metrics["step_time_mean_s"]),
        modeled_bytes_per_step=counts.modeled_bytes,
        modeled_intensity_flops_per_byte=counts.modeled_intensity_flops_per_byte,
        max_rss_bytes=dev.max_rss_bytes(),
        cpu_user_s=measured.cpu_user_s,
        cpu_sys_s=measured.cpu_sys_s,
        wall_s=measured.wall_s,
        count_wall_s=count_s,
        **measured.load,
    )
    if len(times) >= 2:
        metrics["step_time_ci95_rel"] = ci95_half_width_rel(times)
    peak = dev.device_peak_memory_bytes(prep.device)
    if peak is not None:
        metrics["device_peak_mem_bytes"] = peak
    texts = {
        "timing/step_times.csv": step_times_csv(times),
        "flops/deepspeed_forward_profile.txt": forward.report,
        "flops/counts_by_op.csv": counts.ledger.csv(),
        "environment.txt": environment_report(),
    }
    tags = {"data_description": prep.source.description, "measure_stop": measured.stop}
    metrics.update(counts.ledger.metrics())
    tags.update(counts.ledger.tags())
    if prep.fp32_math:
        tags[schema.TAG_FP32_MATH] = prep.fp32_math
    if prep.aux_heads:
        tags[schema.TAG_AUX_LOSS] = ",".join(f"{k}={w}" for k, w in prep.aux_heads.items())
    return BenchResult(metrics, times, texts, tags)


def _runtime_error(exc: BaseException, cfg: TrainConfig, device) -> BenchError:
    if dev.is_out_of_memory(exc):
        return BenchError(
            f"out of memory on {device.type} at batch {cfg.batch_size} ({cfg.model}, {cfg.image_size}px, "
            f"{cfg.precision}): use a smaller --batch or --image-size"
        )
    return BenchError(
        f"{cfg.model} failed to train at batch {cfg.batch_size}, {cfg.image_size}px, {cfg.precision} on {device.type}: {one_line(exc)}"
    )


def progress_bar(cfg: TrainConfig, enabled: bool, extra_steps: int = 0):
    """The progress bar over warmup and measured steps (plus `extra_steps`); a context manager."""
    from tqdm import tqdm

    measured = cfg.max_iters if cfg.iters == "auto" else cfg.iters
    return tqdm(
        total=cfg.warmup_iters + measured + extra_steps,
        desc=f"{cfg.model} b{cfg.batch_size} warmup",
        unit="step",
        disable=not enabled,
        mininterval=0.5,
        leave=False,
    )
