"""The ncu command line (an argument list, never a shell string) and ncu's failures as one-line errors.

`ncu_argv`, `train_argv` and `classify_ncu_output` are pure; `resolve_ncu`, `ncu_version` and
`run_ncu` are the thin edge that touches the system. Flags used (Nsight Compute CLI, see
docs/profiling.md for what was verified):

  --profile-from-start off   profile only between cudaProfilerStart/Stop (torch.cuda.profiler.start/stop)
  --target-processes all     follow the `python -m train` child process
  --nvtx                     NVTX range columns (phase attribution)
  --csv --page details --print-units base --log-file FILE
  --metrics a,b,c            the metric set plus extra metrics
  --replay-mode kernel|application|range|app-range
  --clock-control base|none
  --launch-skip N --launch-count N
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.errors import BenchError
from profiling.ncu_metrics import LEGACY_NVPROF_METRICS, METRIC_SETS, TENSOR_MODES

REPLAY_MODES = ("kernel", "application", "range", "app-range")
CLOCK_CONTROLS = ("base", "none")
INSTALL_HINT = (
    "install Nsight Compute (it ships with the CUDA toolkit as <cuda>/bin/ncu; standalone at "
    "https://developer.nvidia.com/nsight-compute) or pass --ncu /path/to/ncu"
)


@dataclass
class CaptureOptions:
    """How ncu captures the profile-mode training steps."""

    profile_steps: int = 1
    """training steps measured between torch.cuda.profiler.start() and stop() (after warmup)."""
    metric_set: str = "roofline"
    """roofline (FLOPs per precision, tensor work, DRAM/L2/L1 bytes, time) or seed (the course
    brief's list; its flop_count_sp/hp are nvprof-era names that ncu rejects)."""
    extra_metrics: tuple[str, ...] = ()
    """more ncu metric names, appended to the set's --metrics list."""
    replay_mode: str = "kernel"
    """ncu --replay-mode: kernel, application, range or app-range (range modes give one result per
    range, not per kernel)."""
    clock_control: str = "base"
    """ncu --clock-control: base (lock clocks to base, ncu's default) or none (leave clocks alone)."""
    launch_skip: int = 0
    """ncu --launch-skip: profiled-region kernel launches to skip before profiling."""
    launch_count: int | None = None
    """ncu --launch-count: profile at most this many launches (None: all)."""
    tensor_counters: str = "auto"
    """auto (by compute capability), ops (sm__ops_path_tensor_*, sm_80+), inst
    (sm__inst_executed_pipe_tensor.sum x 512, sm_70/75) or none."""
    extra_ncu_args: tuple[str, ...] = field(default=())
    """further ncu arguments inserted before the program (advanced; e.g. ("--cache-control", "none"))."""

    def __post_init__(self) -> None:
        self.extra_metrics = tuple(m.strip() for m in self.extra_metrics if m and m.strip())
        if int(self.profile_steps) < 1:
            raise ValueError(f"profile_steps must be >= 1, got {self.profile_steps}")
        if self.metric_set not in METRIC_SETS:
            raise ValueError(f"metric_set must be one of {', '.join(METRIC_SETS)}, got {self.metric_set!r}")
        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode must be one of {', '.join(REPLAY_MODES)}, got {self.replay_mode!r}")
        if self.clock_control not in CLOCK_CONTROLS:
            raise ValueError(
                f"clock_control must be one of {', '.join(CLOCK_CONTROLS)}, got {self.clock_control!r}"
            )
        if int(self.launch_skip) < 0:
            raise ValueError(f"launch_skip must be >= 0, got {self.launch_skip}")
        if self.launch_count is not None and int(self.launch_count) < 1:
            raise ValueError(f"launch_count must be >= 1 (or unset), got {self.launch_count}")
        if self.tensor_counters not in TENSOR_MODES:
            raise ValueError(
                f"tensor_counters must be one of {', '.join(TENSOR_MODES)}, got {self.tensor_counters!r}"
            )
        bad = [m for m in self.extra_metrics if not re.fullmatch(r"[A-Za-z0-9_.:^$|()\\*+?\[\]-]+", m)]
        if bad:
            raise ValueError(f"extra_metrics has invalid metric names: {', '.join(bad)}")

    @property
    def legacy_metrics(self) -> list[str]:
        """nvprof-era names this capture would ask ncu for (it will reject them)."""
        asked = (["flop_count_sp", "flop_count_hp"] if self.metric_set == "seed" else []) + list(self.extra_metrics)
        return [m for m in asked if m in LEGACY_NVPROF_METRICS]


def train_argv(python: str, config_flags: list[str], profile_steps: int) -> list[str]:
    """The profiled program: `python -m train <config flags> --profile-steps K`."""
    return [python, "-m", "train", *config_flags, "--profile-steps", str(int(profile_steps))]


def ncu_argv(ncu: str, log_file: str | os.PathLike, metrics: list[str], opts: CaptureOptions, program: list[str]) -> list[str]:
    """The whole ncu command as a list (never a shell string)."""
    argv = [
        str(ncu),
        "--profile-from-start", "off",
        "--target-processes", "all",
        "--nvtx",
        "--csv",
        "--page", "details",
        "--print-units", "base",
        "--log-file", str(log_file),
        "--metrics", ",".join(metrics),
        "--replay-mode", opts.replay_mode,
        "--clock-control", opts.clock_control,
    ]  # fmt: skip
    if opts.launch_skip:
        argv += ["--launch-skip", str(int(opts.launch_skip))]
    if opts.launch_count is not None:
        argv += ["--launch-count", str(int(opts.launch_count))]
    argv += list(opts.extra_ncu_args)
    return argv + list(program)


# ------------------------------------------------------------------------------------ errors
PERM_MESSAGE = (
    "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run it as root/administrator, "
    "or allow all users with the NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0 "
    "(https://developer.nvidia.com/ERR_NVGPUCTRPERM); in a container also add --cap-add SYS_ADMIN"
)
NO_KERNELS_MESSAGE = (
    "ncu profiled no kernels: with --profile-from-start off only kernels between "
    "torch.cuda.profiler.start() and stop() count, so check that `python -m train ... --profile-steps K` "
    "reaches its measured steps, and that --launch-skip is below the number of kernels launched"
)
_MISSING_METRIC = re.compile(
    r"Failed to find metric\s+(?:regex:)?\^?(?P<name>[A-Za-z0-9_]+(?:\\?\.[A-Za-z0-9_]+)*)", re.IGNORECASE
)
_APP_ERROR = re.compile(r"The application returned an error code \((?P<code>-?\d+)\)", re.IGNORECASE)


def legacy_message(names: list[str]) -> str:
    return (
        f"ncu rejects {', '.join(names)}: these are nvprof-era metric names (the course brief's seed set) "
        "that Nsight Compute does not have; use --metric-set roofline, which counts FLOPs from "
        "sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum (docs/profiling.md)"
    )


def classify_ncu_output(text: str, returncode: int | None = 0) -> str | None:
    """The one-line reason an ncu run failed, from its log text and exit code; None when it looks fine.

    Checked in order: counter permission, unknown (incl. nvprof-era) metrics, the profiled program
    failing, no kernels profiled, any other ==ERROR== or non-zero exit.
    """
    text = text or ""
    if "ERR_NVGPUCTRPERM" in text:
        return PERM_MESSAGE
    missing = []
    for m in _MISSING_METRIC.finditer(text):
        name = m["name"].replace("\\.", ".")
        if name not in missing:
            missing.append(name)
    if missing:
        legacy = [n for n in missing if n.split(".")[0] in LEGACY_NVPROF_METRICS]
        if legacy:
            return legacy_message([n.split(".")[0] for n in legacy])
        return (
            f"ncu does not know metric(s) {', '.join(missing)} on this GPU or ncu version: list the available "
            "ones with `ncu --query-metrics`, drop them from --metrics, or choose --tensor-counters inst|none"
        )
    app = _APP_ERROR.search(text)
    if app:
        return (
            f"the profiled program failed under ncu (exit code {app['code']}): read its output above and try "
            "the same `python -m train ... --profile-steps K` without ncu"
        )
    if re.search(r"No kernels were profiled", text, re.IGNORECASE):
        return NO_KERNELS_MESSAGE
    errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("==ERROR==")]
    if errors:
        return f"ncu failed: {errors[-1][len('==ERROR=='):].strip()}"
    if returncode not in (0, None):
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        return f"ncu exited with code {returncode}: {last[:300]}"
    return None


# ------------------------------------------------------------------------------------ edge
def resolve_ncu(ncu: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """Absolute path of the ncu executable, or BenchError saying how to install it."""
    if os.sep in ncu or (os.altsep and os.altsep in ncu):
        p = Path(ncu).expanduser()
        if p.is_file() and os.access(p, os.X_OK):
            return str(p.resolve())
        raise BenchError(f"ncu not found at {ncu}: {INSTALL_HINT}")
    found = which(ncu)
    if not found:
        raise BenchError(f"`{ncu}` (Nsight Compute CLI) is not on PATH: {INSTALL_HINT}")
    return found


def ncu_version(ncu: str) -> str:
    """Last line of `ncu --version` ("Version 2025.1.0.0 (build ...)"), or "unknown"."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [ln.strip() for ln in (out.stdout or "").splitlines() if ln.strip()]
    return lines[-1][:250] if out.returncode == 0 and lines else "unknown"


def run_ncu(
    argv: list[str],
    log_file: str | os.PathLike,
    cwd: str | os.PathLike | None = None,
    say: Callable[[str], None] = print,
    poll_s: float = 15.0,
) -> int:
    """Run ncu (the program's own output goes to this terminal); print a progress line every
    `poll_s` seconds; return ncu's exit code."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd)
    except OSError as exc:
        raise BenchError(f"cannot start {argv[0]}: {exc.strerror or exc}: {INSTALL_HINT}") from exc
    try:
        while True:
            try:
                return proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                size = os.path.getsize(log_file) if os.path.exists(log_file) else 0
                say(f"  ncu running: {time.monotonic() - t0:.0f} s, log {size / 1e3:.0f} kB")
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
