"""`python -m profiling.peaks`: measure this device's roofline ceilings and log a `peaks` run.

The CLI edge around the package: flags -> PeaksConfig -> device facts (torch, /proc, /sys)
-> dtype probes (CPU) -> measurement within the time budget, with a progress bar -> one MLflow run
through common.tracking.RunSession -> where the time went (stderr) and one summary line (stdout).
See docs/peaks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import console, envinfo, flags, schema, ui
from common.fmt import si
from common.cli import ArgumentParser, cli_entry
from common.errors import BenchError, UsageError, one_line
from common.tracking import RunSession
from profiling.peaks import facts, gemm, measure, sizing
from profiling.peaks.config import PeaksConfig
from profiling.peaks.dtypes import dtype_availability, select_dtypes
from profiling.peaks.results import PeaksResult, summary_line, vendor_fields
from common.load import LoadSampler
from profiling.peaks.sampling import Measurement
from profiling.peaks.stream import STREAM_ELEMENT_BYTES, l2_copies_per_launch
from roofline.vendor import find
from train.device import is_out_of_memory
from train.device import resolve_device as resolve


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m profiling.peaks",
        description="Measure the compute (GEMM per dtype) and DRAM (STREAM copy/triad) ceilings of "
        "a device and log them as an MLflow `peaks` run.",
    )
    flags.add_flags(p, PeaksConfig)
    return p


def resolve_device(requested: str) -> str:
    """train.device.resolve_device, its one-line refusal prefixed with the flag."""
    try:
        return str(resolve(requested))
    except UsageError as err:
        raise UsageError(f"--device {requested}: {err}") from None


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

    set_tags = log_metrics = log_text = set_note = flush = log_params


def _where(session, config: PeaksConfig) -> str:
    if not config.track:
        return "not tracked"
    if session.offline:
        return f"run spooled to {session.spool_path}"
    return f"run {session.run_id}"


def _measure(device, dtypes, n, array_bytes, l2_bytes, config, skipped, ratios) -> PeaksResult:
    from tqdm import tqdm

    steps = measure.plan(dtypes, l2=l2_bytes > 0)
    with tqdm(
        total=len(steps),
        desc=steps[0],
        unit="step",
        file=sys.stderr,
        dynamic_ncols=True,
        disable=console.is_quiet(),
    ) as bar:
        done = []

        def on_step(label: str, meas: Measurement) -> None:
            done.append(label)
            unit = "FLOP/s" if meas.unit == "flops" else "B/s"
            bar.set_postfix_str(f"{label}: {si(meas.best, unit)}")
            if len(done) < len(steps):
                bar.set_description(steps[len(done)])
            bar.update(1)

        try:
            return measure.run_peaks(
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
        except RuntimeError as err:  # what CUDA and CPU allocators raise when out of memory
            if not is_out_of_memory(err):
                raise
            step = steps[len(done)] if len(done) < len(steps) else "measurement"
            raise BenchError(
                f"out of memory during {step}: use a smaller --matrix-size or --bandwidth-mib"
            ) from err


def keep_partial(session, partial: PeaksResult | None) -> None:
    """Log the ceilings measured before an interrupt or a failure on the run that ends KILLED or
    FAILED (as train keeps the steps it measured): the metrics of the steps that ended, their
    samples, and tag `peaks_partial` naming them. Analysis uses FINISHED peaks runs only, so these
    are kept for reading, never drawn as ceilings."""
    if partial is None or not partial.measurements():
        return
    try:
        session.log_metrics(partial.metrics())
        session.log_text("peaks/samples.json", json.dumps(partial.to_dict(), indent=1))
        session.set_tags(
            {"peaks_partial": "measured before it stopped: " + ", ".join(partial.step_s)}
        )
    except Exception as exc:  # noqa: BLE001 - never hide the interrupt or failure itself
        console.warn(f"could not keep the ceilings measured so far ({one_line(exc)[:160]})")


def _session(config: PeaksConfig, device_type: str, tags: dict):
    return RunSession(
        "peaks",
        experiment=config.experiment,
        run_name=ui.run_name([device_type, config.env_label], kind="peaks"),
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

    NAMES = {
        "startup": "python start-up and imports",
        "device": "device facts (torch import)",
        "probes": "dtype probes",
        "environment": "environment (collect_env)",
        "tracking": "tracking setup (MLflow store)",
        "measure": "measuring",
        "logging": "logging",
    }

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
        parts = ", ".join(f"{self.NAMES.get(k, k)} {v:.1f} s" for k, v in self.seconds.items())
        return f"time: {parts}; total {sum(self.seconds.values()):.1f} s"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    phases = _Phases()
    startup = _process_age_s() if argv is None else None  # only for `python -m profiling.peaks`
    if startup is not None:
        phases.seconds["startup"] = startup
    config = flags.build(PeaksConfig, build_parser().parse_args(argv))
    device = resolve_device(config.device)
    device_type = device.split(":")[0]
    name = envinfo.device_name(device)
    # a bad peaks file fails here, before measuring
    vendor = find(name, overrides=config.peaks_file or None)
    hw = facts.device_facts(device)
    phases.lap("device")
    ratios: dict[str, float] = {}
    if device_type == "cpu" and config.dtypes is None:
        ratios = gemm.probe_cpu_ratios()  # decides whether fp16 and bf16 are CPU defaults
    phases.lap("probes")
    availability = dtype_availability(device_type, hw.capability, hw.bf16_supported, ratios)
    dtypes, skipped = select_dtypes(config.requested_dtypes(availability), availability)
    n = config.matrix_size_for(device_type)
    array_bytes, l2_bytes, warnings = _array_sizes(config, n, dtypes, hw)
    _say_what_is_left_out(warnings, skipped, l2_bytes)
    tags = _run_tags(device, config, dtypes, skipped, hw)
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
                "stream_element_bytes": STREAM_ELEMENT_BYTES,
                "l2_array_bytes": l2_bytes,
                "l2_copies_per_launch": l2_copies_per_launch(l2_bytes, device_type),
            }
        )
        s.flush()
        phases.lap("tracking")
        try:
            with LoadSampler() as load:
                result = _measure(device, dtypes, n, array_bytes, l2_bytes, config, skipped, ratios)
        except BaseException as exc:  # interrupted (KILLED) or failed: keep what was measured
            partial = getattr(
                exc, "partial_peaks", None
            )  # an out-of-memory BenchError: its cause's
            keep_partial(s, partial or getattr(exc.__cause__, "partial_peaks", None))
            raise
        phases.lap("measure")
        s.log_metrics(load.metrics())
        _log_result(s, result, vendor, phases, summary_line(device, name, result, vendor, config))
    phases.lap("logging")
    console.note(phases.text())
    total_s = sum(phases.seconds.values())
    line = summary_line(device, name, result, vendor, config, _where(session, config), total_s)
    _say(line, session, config)
    return 0


def _say(line: str, session, config: PeaksConfig) -> None:
    """The summary line, then the run's link and its view's."""
    console.result(line)
    if config.track and not session.offline:
        ui.say_links("peaks", session.run_id, session.experiment_id)


def _array_sizes(config: PeaksConfig, n: int, dtypes, hw) -> tuple[int, int, list[str]]:
    """Bytes per DRAM STREAM array and per L2 array, and the warnings about those sizes."""
    if config.bandwidth_mib:
        array_bytes = config.bandwidth_mib * sizing.MIB
        warnings = sizing.check_sizes(array_bytes, n, dtypes, hw)
    else:
        array_bytes, cap_warning = sizing.dram_array_bytes(hw.llc_bytes, hw.free_bytes)
        warnings = sizing.check_sizes(array_bytes, n, dtypes, hw, cache_warning=False)
        warnings += [cap_warning] if cap_warning else []
    return array_bytes, sizing.l2_array_bytes(hw.l2_bytes), warnings


def _say_what_is_left_out(warnings: list[str], skipped: dict[str, str], l2_bytes: int) -> None:
    """Before measuring: the size warnings, the dtypes not measured and a missing L2 ceiling."""
    for warning in warnings:
        console.warn(warning)
    if skipped:
        console.note("not measured: " + "; ".join(f"{d} ({why})" for d, why in skipped.items()))
    if not l2_bytes:
        console.note("L2 size unknown on this device: no L2 ceiling measured")


def _run_tags(device: str, config: PeaksConfig, dtypes, skipped: dict[str, str], hw) -> dict:
    """The run's tags: the environment, the dtypes measured and skipped, the CPU's matrix
    extensions, the cache sizes."""
    tags = envinfo.environment_tags(device, config.env_label)
    tags["dtypes_measured"] = ",".join(dtypes)
    tags["stream_counting"] = "STREAM: copy 2 arrays, triad 3 arrays"
    if skipped:
        tags["dtypes_skipped"] = "; ".join(f"{d}: {why}" for d, why in skipped.items())[:5000]
    if device.split(":")[0] == "cpu":
        import torch

        tags["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
        tags["cpu_matrix_flags"] = facts.cpu_matrix_flags()
    if hw.llc_bytes:
        tags["llc_bytes"] = str(hw.llc_bytes)
    if hw.l2_bytes:
        tags["l2_bytes"] = str(hw.l2_bytes)
    return tags


def _log_result(s, result: PeaksResult, vendor, phases: _Phases, note: str) -> None:
    """Say what the samples showed, then log the ceilings beside the vendor's, the budget's cuts,
    every sample (peaks/samples.json), the description `note` and the environment."""
    if result.l2_withheld:
        console.warn(result.l2_withheld)
    for label, meas in result.headline().items():
        if meas.bimodal:
            console.note(f"{label} samples bimodal (best reported): {meas.spread_text()}")
    v_params, v_tags, v_metrics = vendor_fields(vendor, result)
    cuts = result.budget_cuts()
    s.log_params(v_params)
    s.set_tags(
        {
            **v_tags,
            "peak_dram_kernel": result.dram_kernel,
            **({"peak_l2_kernel": result.l2_kernel} if result.l2 else {}),
            **({"peak_l2_withheld": result.l2_withheld} if result.l2_withheld else {}),
            "time_budget_cut": ", ".join(f"{k} {t}/{a}" for k, (t, a) in cuts.items()) or "none",
            "samples_bimodal": ", ".join(result.bimodal()) or "none",
        }
    )
    s.log_metrics({**result.metrics(), **v_metrics, **phases.setup_metrics()})
    s.log_text("peaks/samples.json", json.dumps(result.to_dict(), indent=1))
    s.set_note(note)
    s.log_text("environment.txt", envinfo.environment_report())


if __name__ == "__main__":
    sys.exit(main())
