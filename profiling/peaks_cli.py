"""`python -m profiling.peaks`: measure this device's roofline ceilings and log a `peaks` run.

The CLI edge around profiling/peaks.py: flags -> PeaksConfig -> device facts (torch, /proc, /sys)
-> dtype probes (CPU) -> measurement within the time budget, with a progress bar -> one MLflow run
through common.tracking.RunSession -> where the time went (stderr) and one summary line (stdout).
See docs/peaks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import envinfo, schema
from common.cli import cli_entry
from common.errors import BenchError, UsageError
from profiling import peaks as core
from profiling.peak_table import DTYPES, PEAKS_FILE_ENV, VendorPeaks, find
from common.cli import ArgumentParser, str_bool


def build_parser() -> argparse.ArgumentParser:
    d = core.PeaksConfig(env_label="x")
    p = ArgumentParser(
        prog="python -m profiling.peaks",
        description="Measure the compute (GEMM per dtype) and DRAM (STREAM copy/triad) ceilings of a device "
        "and log them as an MLflow `peaks` run.",
    )
    p.add_argument(
        "--device", default=d.device, help="auto | cpu | cuda | cuda:N | mps (default: auto)"
    )
    p.add_argument(
        "--dtypes",
        default="auto",
        help=f"comma-separated among {','.join(DTYPES)}; auto = what the device supports except fp64; "
        "all = everything it can run (default: auto)",
    )
    p.add_argument(
        "--matrix-size",
        type=int,
        default=d.matrix_size,
        help="n of the n^3 matmuls; 0 = 4096 on cpu/mps, 8192 on cuda (default: 0)",
    )
    p.add_argument(
        "--bandwidth-mib",
        type=int,
        default=d.bandwidth_mib,
        help="MiB per DRAM STREAM array (3 arrays); 0 = max(512, 4x the last-level cache), capped at "
        "half the available memory for the three (default: 0)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=d.repeats,
        help="timed samples per dtype, at most (default: 5)",
    )
    p.add_argument(
        "--bandwidth-repeats",
        type=int,
        default=d.bandwidth_repeats,
        help="timed samples per STREAM kernel, DRAM and L2, at most (default: 10)",
    )
    p.add_argument(
        "--time-budget-s",
        type=float,
        default=d.time_budget_s,
        help="seconds of measuring, split over the steps; a step stops sampling when its share is spent "
        f"(after {core.MIN_SAMPLES} samples); 0 = no budget (default: {d.time_budget_s:g})",
    )
    p.add_argument(
        "--env-label", default=None, help="name of this environment (default: host name)"
    )
    p.add_argument(
        "--experiment",
        default=None,
        help="MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME)",
    )
    p.add_argument(
        "--peaks-file",
        default=None,
        help=f"JSON/YAML vendor-peak entries to add or override (default: ${PEAKS_FILE_ENV})",
    )
    p.add_argument(
        "--track",
        type=str_bool,
        nargs="?",
        const=True,
        default=True,
        help="log a peaks run to MLflow (default: true)",
    )
    p.add_argument("--no-track", dest="track", action="store_false", help="same as --track false")
    return p


def config_from_args(args: argparse.Namespace) -> core.PeaksConfig:
    dtypes_text = (args.dtypes or "auto").strip().lower()
    dtypes = (
        None
        if dtypes_text == "auto"
        else tuple(x for x in (t.strip() for t in dtypes_text.split(",")) if x)
    )
    try:
        return core.PeaksConfig(
            device=args.device,
            dtypes=dtypes,
            matrix_size=args.matrix_size,
            bandwidth_mib=args.bandwidth_mib,
            repeats=args.repeats,
            bandwidth_repeats=args.bandwidth_repeats,
            time_budget_s=args.time_budget_s,
            env_label=args.env_label or "",
            experiment=args.experiment or None,
            peaks_file=args.peaks_file or None,
            track=args.track,
        )
    except ValueError as err:
        raise UsageError(str(err)) from None


# --------------------------------------------------------------------------- device facts
def resolve_device(requested: str) -> str:
    """auto -> cuda, then mps, then cpu; an unavailable device is a UsageError."""
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            built = (
                f"built with CUDA {torch.version.cuda}"
                if torch.version.cuda
                else "built without CUDA"
            )
            raise UsageError(
                f"--device {requested}: CUDA is not available (torch {torch.__version__} {built}, no usable GPU); "
                "use --device cpu or auto"
            )
        index = int(requested.split(":", 1)[1]) if ":" in requested else 0
        if index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        return requested
    if requested == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            "--device mps: MPS is not available (needs Apple silicon and a torch build with MPS); use --device cpu"
        )
    return requested


@dataclass(frozen=True)
class DeviceFacts:
    capability: tuple[int, int] | None = None
    bf16_supported: bool = False
    llc_bytes: int | None = None  # CPU last-level caches (all instances) or GPU L2
    free_bytes: int | None = None  # memory the measurement may use
    l2_bytes: int | None = None  # L2 the measuring threads use (CPU: per-core L2s) or GPU L2


def device_facts(device: str) -> DeviceFacts:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        free, _total = torch.cuda.mem_get_info(dev)
        l2 = int(getattr(props, "L2_cache_size", 0)) or None
        return DeviceFacts(
            (props.major, props.minor),
            bool(torch.cuda.is_bf16_supported(including_emulation=False)),
            l2,
            int(free),
            l2,
        )
    if dev.type == "mps":
        return DeviceFacts(
            None, bool(torch.backends.mps.is_macos_or_newer(14, 0)), None, _available_ram()
        )
    threads = min(torch.get_num_threads(), _usable_cpus())
    return DeviceFacts(
        None, True, cpu_last_level_cache_bytes(), _available_ram(), cpu_cache_bytes(2, cpus=threads)
    )


def _available_ram() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - optional fact
        return None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _count_cpus(cpu_list: str) -> int:
    """'0-3,8,10-11' -> 7 (sysfs shared_cpu_list)."""
    count = 0
    for part in cpu_list.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            count += int(hi) - int(lo) + 1
        elif part.strip():
            count += 1
    return count


@dataclass(frozen=True)
class CacheInfo:
    level: int
    size_bytes: int  # one instance
    cpus_sharing: int  # CPUs sharing one instance; 0 when sysfs does not say


def cpu_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> list[CacheInfo]:
    """cpu0's data and unified caches from sysfs (Linux), e.g. level 3, 491520K shared by CPUs 0-1."""
    out = []
    for index in sorted(Path(root).glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            size_text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        try:
            if (index / "type").read_text().strip().lower() == "instruction":
                continue
        except OSError:
            pass
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size_text[-1:], 1)
        digits = size_text.rstrip("KMG")
        if not digits.isdigit():
            continue
        try:
            sharing = _count_cpus((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            sharing = 0
        out.append(CacheInfo(level, int(digits) * scale, sharing))
    return out


def cpu_cache_bytes(
    level: int, root: str = "/sys/devices/system/cpu/cpu0/cache", cpus: int | None = None
) -> int | None:
    """Total size of the level-`level` caches that `cpus` CPUs (default: all) use: one instance's
    size times ceil(cpus / CPUs sharing one instance); one instance when sysfs does not say."""
    found = [c for c in cpu_caches(root) if c.level == level]
    if not found:
        return None
    cache = max(found, key=lambda c: c.size_bytes)
    cpus = cpus or os.cpu_count() or 1
    instances = math.ceil(cpus / cache.cpus_sharing) if cache.cpus_sharing else 1
    return cache.size_bytes * instances


def cpu_last_level_cache_bytes(
    root: str = "/sys/devices/system/cpu/cpu0/cache", cpus: int | None = None
) -> int | None:
    """Total size of the highest cache level (all its instances), e.g. one 491520K L3 -> 503316480."""
    caches = cpu_caches(root)
    return cpu_cache_bytes(max(c.level for c in caches), root, cpus) if caches else None


def cpu_matrix_flags(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's matrix/low-precision flags (AMX, AVX512-BF16/FP16, AVX-VNNI) from /proc/cpuinfo."""
    wanted = (
        "amx_bf16",
        "amx_fp16",
        "amx_tile",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "avx512f",
        "avx2",
    )
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in wanted if f in have) or "none"
    except OSError:
        pass
    return "unknown"


def check_sizes(
    array_bytes: int,
    matrix_size: int,
    dtypes: list[str],
    facts: DeviceFacts,
    cache_warning: bool = True,
) -> list[str]:
    """UsageError when the buffers cannot fit; warnings (returned) when STREAM arrays are cache-sized
    (unless cache_warning is false: the automatic size warns about its own cap)."""
    stream_need = 3 * array_bytes
    widest = (
        max((8 if d == "fp64" else 4 if d in ("fp32", "tf32") else 2) for d in dtypes)
        if dtypes
        else 4
    )
    gemm_need = 3 * matrix_size**2 * widest
    if facts.free_bytes is not None:
        for what, need, flag in (
            ("STREAM arrays", stream_need, "--bandwidth-mib"),
            ("matmul operands", gemm_need, "--matrix-size"),
        ):
            if need > 0.9 * facts.free_bytes:
                raise UsageError(
                    f"the {what} need {need / 2**30:.1f} GiB but only {facts.free_bytes / 2**30:.1f} GiB is free; "
                    f"use a smaller {flag}"
                )
    warnings = []
    if cache_warning and facts.llc_bytes and array_bytes < core.DRAM_LLC_FACTOR * facts.llc_bytes:
        warnings.append(
            f"warning: each STREAM array ({array_bytes / 2**20:.0f} MiB) is less than 4x the last-level cache "
            f"({facts.llc_bytes / 2**20:.0f} MiB): the bandwidth measured may be partly cache bandwidth"
        )
    return warnings


# --------------------------------------------------------------------------- logging
class _NoRun:
    """Stands in for RunSession with --track false."""

    run_id = None
    offline = False
    spool_path = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def log_params(self, *_):
        pass

    set_tags = log_metrics = log_text = flush = log_params


def vendor_fields(vendor: VendorPeaks | None, result: core.PeaksResult) -> tuple[dict, dict, dict]:
    """(params, tags, metrics) describing the vendor entry and the measured fraction of it."""
    if vendor is None:
        return {}, {"vendor_peaks": "none"}, {}
    params = {f"vendor_peak_flops_per_s_{d}": v for d, v in vendor.flops_per_s.items()}
    params["vendor_peak_dram_bytes_per_s"] = vendor.dram_bytes_per_s
    for level in ("l2", "l1"):
        if getattr(vendor, f"{level}_bytes_per_s") is not None:
            params[f"vendor_peak_{level}_bytes_per_s"] = getattr(vendor, f"{level}_bytes_per_s")
    tags = {"vendor_peaks": vendor.device_name, "vendor_source": vendor.source[:5000]}
    metrics = {
        f"fraction_of_vendor_flops_{d}": m.best / vendor.flops_per_s[d]
        for d, m in result.compute.items()
        if d in vendor.flops_per_s
    }
    if result.stream:
        metrics["fraction_of_vendor_dram"] = (
            result.stream[result.dram_kernel].best / vendor.dram_bytes_per_s
        )
    if result.l2 and not result.l2_withheld and vendor.l2_bytes_per_s is not None:
        metrics["fraction_of_vendor_l2"] = result.l2[result.l2_kernel].best / vendor.l2_bytes_per_s
    return params, tags, metrics


def budget_text(result: core.PeaksResult, config: core.PeaksConfig) -> str:
    """How many samples were taken, and whether the time budget cut any step."""
    cuts = result.budget_cuts()
    if cuts:
        taken = ", ".join(f"{label} {t}/{a}" for label, (t, a) in cuts.items())
        return f"the {config.time_budget_s:g} s time budget cut sampling ({taken} samples)"
    budget = (
        f"within the {config.time_budget_s:g} s time budget"
        if config.time_budget_s
        else "no time budget"
    )
    return f"best of {config.repeats}/{config.bandwidth_repeats} samples, {budget}"


def summary_line(
    device: str,
    name: str,
    result: core.PeaksResult,
    vendor: VendorPeaks | None,
    session,
    config,
    total_s: float | None = None,
) -> str:
    parts = []
    for d, m in result.compute.items():
        text = f"{d} {core.format_rate(m.best, 'FLOP/s')}"
        if vendor and d in vendor.flops_per_s:
            text += f" ({m.best / vendor.flops_per_s[d]:.0%} of datasheet)"
        parts.append(text)
    if result.stream:
        best = result.stream[result.dram_kernel].best
        text = f"DRAM {core.format_rate(best, 'B/s')} ({result.dram_kernel})"
        if vendor:
            text += f" ({best / vendor.dram_bytes_per_s:.0%} of datasheet)"
        parts.append(text)
    if result.l2:
        best = result.l2[result.l2_kernel].best
        text = f"L2 {core.format_rate(best, 'B/s')} ({result.l2_kernel})"
        if result.l2_withheld:
            text += " (below DRAM: disturbed, not reported as peak_l2)"
        elif vendor and vendor.l2_bytes_per_s is not None:
            text += f" ({best / vendor.l2_bytes_per_s:.0%} of datasheet)"
        parts.append(text)
    if not config.track:
        where = "not tracked"
    elif session.offline:
        where = f"run spooled to {session.spool_path}"
    else:
        where = f"run {session.run_id}"
    took = f"measured in {result.wall_s:.1f} s" + (
        f" ({total_s:.1f} s in all)" if total_s is not None else ""
    )
    return f"peaks {device} [{name}]: {', '.join(parts)}; {budget_text(result, config)}; {took}; {where}"


# --------------------------------------------------------------------------- main
def _measure(device, dtypes, n, array_bytes, l2_bytes, config, skipped, ratios) -> core.PeaksResult:
    from tqdm import tqdm

    steps = core.plan(dtypes, l2=l2_bytes > 0)
    with tqdm(
        total=len(steps), desc=steps[0], unit="step", file=sys.stderr, dynamic_ncols=True
    ) as bar:
        done = []

        def on_step(label: str, meas: core.Measurement) -> None:
            done.append(label)
            bar.set_postfix_str(
                f"{label}: {core.format_rate(meas.best, 'FLOP/s' if meas.unit == 'flops' else 'B/s')}"
            )
            if len(done) < len(steps):
                bar.set_description(steps[len(done)])
            bar.update(1)

        try:
            return core.run_peaks(
                device,
                dtypes,
                n,
                array_bytes,
                config.repeats,
                config.bandwidth_repeats,
                l2_array_bytes=l2_bytes,
                time_budget_s=config.time_budget_s,
                skipped=skipped,
                cpu_probe_ratios=ratios,
                on_step=on_step,
            )
        except RuntimeError as err:  # out of memory (CUDA OOM is a RuntimeError too)
            text = str(err).lower()
            if (
                "out of memory" in text
                or "can't allocate memory" in text
                or "not enough memory" in text
            ):
                raise BenchError(
                    f"out of memory during {steps[len(done)] if len(done) < len(steps) else 'measurement'}: "
                    "use a smaller --matrix-size or --bandwidth-mib"
                ) from err
            raise


def _session(config: core.PeaksConfig, device_type: str, tags: dict):
    from common.tracking import RunSession

    return RunSession(
        "peaks",
        experiment=config.experiment,
        run_name=f"peaks-{device_type}-{config.env_label}",
        tags={**tags, schema.TAG_ENV_LABEL: config.env_label},
    )


def _process_age_s() -> float | None:
    """Seconds since this process started (Python start-up and imports before main), if known."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - optional fact
        return None


class _Phases:
    """Wall time per phase of the command, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._t
        self._t = now

    def setup_metrics(self) -> dict[str, float]:
        """setup_<phase>_s for every phase before measuring, and their sum setup_s."""
        before = {k: v for k, v in self.seconds.items() if k not in ("measure", "logging")}
        return {**{f"setup_{k}_s": v for k, v in before.items()}, "setup_s": sum(before.values())}

    def text(self) -> str:
        names = {
            "startup": "python start-up and imports",
            "device": "device facts (torch import)",
            "probes": "dtype probes",
            "environment": "environment (collect_env)",
            "tracking": "tracking setup (MLflow store)",
            "measure": "measuring",
            "logging": "logging",
        }
        parts = ", ".join(f"{names.get(k, k)} {v:.1f} s" for k, v in self.seconds.items())
        return f"note: time: {parts}; total {sum(self.seconds.values()):.1f} s"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    phases = _Phases()
    startup = (
        _process_age_s() if argv is None else None
    )  # only meaningful for `python -m profiling.peaks`
    if startup is not None:
        phases.seconds["startup"] = startup
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    device = resolve_device(config.device)
    device_type = device.split(":")[0]
    name = envinfo.device_name(device)
    vendor = find(
        name, overrides=config.peaks_file
    )  # a bad peaks file fails here, before measuring
    facts = device_facts(device)
    phases.lap("device")
    ratios: dict[str, float] = {}
    if device_type == "cpu" and config.dtypes is None:
        ratios = (
            core.probe_cpu_ratios()
        )  # decides whether fp16 and bf16 are CPU defaults (dtype_availability)
    phases.lap("probes")
    availability = core.dtype_availability(
        device_type, facts.capability, facts.bf16_supported, ratios
    )
    dtypes, skipped = core.select_dtypes(config.requested_dtypes(availability), availability)
    n = config.matrix_size_for(device_type)
    if config.bandwidth_mib:
        array_bytes = config.bandwidth_mib * core.MIB
        warnings = check_sizes(array_bytes, n, dtypes, facts)
    else:
        array_bytes, cap_warning = core.dram_array_bytes(facts.llc_bytes, facts.free_bytes)
        warnings = check_sizes(array_bytes, n, dtypes, facts, cache_warning=False) + (
            [cap_warning] if cap_warning else []
        )
    l2_bytes = core.l2_array_bytes(facts.l2_bytes)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if skipped:
        print(
            "note: not measured: " + "; ".join(f"{d} ({why})" for d, why in skipped.items()),
            file=sys.stderr,
        )
    if not l2_bytes:
        print("note: L2 size unknown on this device: no L2 ceiling measured", file=sys.stderr)

    tags = envinfo.environment_tags(device, config.env_label)
    tags.update(
        {
            "dtypes_measured": ",".join(dtypes),
            "stream_counting": "STREAM: copy 2 arrays, triad 3 arrays",
        }
    )
    if skipped:
        tags["dtypes_skipped"] = "; ".join(f"{d}: {why}" for d, why in skipped.items())[:5000]
    if device_type == "cpu":
        import torch

        tags["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
        tags["cpu_matrix_flags"] = cpu_matrix_flags()
    if facts.llc_bytes:
        tags["llc_bytes"] = str(facts.llc_bytes)
    if facts.l2_bytes:
        tags["l2_bytes"] = str(facts.l2_bytes)
    phases.lap("environment")
    session = _session(config, device_type, tags) if config.track else _NoRun()
    with session as s:
        s.log_params(
            {
                **config.params(),
                "device_resolved": device,
                "dtypes_resolved": ",".join(dtypes),
                "matrix_size_resolved": n,
                "stream_array_bytes": array_bytes,
                "stream_element_bytes": core.STREAM_ELEMENT_BYTES,
                "l2_array_bytes": l2_bytes,
            }
        )
        s.flush()
        phases.lap("tracking")
        result = _measure(device, dtypes, n, array_bytes, l2_bytes, config, skipped, ratios)
        phases.lap("measure")
        if result.l2_withheld:
            print(f"warning: {result.l2_withheld}", file=sys.stderr)
        v_params, v_tags, v_metrics = vendor_fields(vendor, result)
        cuts = result.budget_cuts()
        s.log_params(v_params)
        s.set_tags(
            {
                **v_tags,
                "peak_dram_kernel": result.dram_kernel,
                **({"peak_l2_kernel": result.l2_kernel} if result.l2 else {}),
                **({"peak_l2_withheld": result.l2_withheld} if result.l2_withheld else {}),
                "time_budget_cut": ", ".join(f"{k} {t}/{a}" for k, (t, a) in cuts.items())
                or "none",
            }
        )
        s.log_metrics({**result.metrics(), **v_metrics, **phases.setup_metrics()})
        s.log_text("peaks/samples.json", json.dumps(result.to_dict(), indent=1))
        s.log_text("environment.txt", envinfo.environment_report())
    phases.lap("logging")
    print(phases.text(), file=sys.stderr)
    print(summary_line(device, name, result, vendor, session, config, sum(phases.seconds.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
