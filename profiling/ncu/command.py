"""The ncu command line (an argument list, never a shell string) and running it.

`ncu_argv` and `train_argv` are pure (so is `classify_ncu_output`, in profiling.ncu.messages
so that the import path uses it too); `resolve_ncu`, `ncu_version` and
`run_ncu` are the thin edge that touches the system. `run_ncu` tees ncu's console output to the
terminal and keeps it, so a failure ncu prints only to the console is classified too. Flags used (Nsight Compute CLI, see
docs/profiling.md for what was verified):

  --profile-from-start off   profile only between cudaProfilerStart/Stop (torch.cuda.profiler.start/stop)
  --target-processes all     also profile child processes (application-only with --compile, so
                             ncu stays out of Inductor's compile workers)
  --nvtx                     NVTX range columns (phase attribution)
  --csv --page details --print-units base --log-file FILE
  --metrics a,b,c            the metric set plus extra metrics
  --replay-mode kernel|application|range|app-range   (the application modes are checked
                             against `ncu --help` before starting)
  --clock-control base|none
  --cache-control all|none
  --launch-skip N --launch-count N
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common import console, flags
from common.cli import optional
from common.errors import BenchError
from profiling.ncu.messages import LEGACY_NVPROF_METRICS
from profiling.ncu.plan import METRIC_SETS, TENSOR_MODES

REPLAY_MODES = ("kernel", "application", "range", "app-range")
APPLICATION_REPLAY = ("application", "app-range")
"""Replay modes that rerun the whole program once per pass: its kernels must be the same each time."""
CLOCK_CONTROLS = ("base", "none")
CACHE_CONTROLS = ("all", "none")
TARGET_PROCESSES = ("all", "application-only")
INSTALL_HINT = (
    "install Nsight Compute (it ships with the CUDA toolkit as <cuda>/bin/ncu; standalone at "
    "https://developer.nvidia.com/nsight-compute) or pass --ncu /path/to/ncu"
)


@dataclass
class CaptureOptions:
    """How ncu captures the profile-mode training steps."""

    profile_steps: int = 1
    """training steps profiled after warmup, between torch.cuda.profiler.start() and stop()."""
    metric_set: str = field(default="roofline", metadata={"choices": METRIC_SETS})
    """roofline (FLOPs per precision, tensor work, DRAM/L2/L1 bytes, time) or seed (the course
    brief's quantities: fp32/fp16 FLOPs, DRAM and PCIe bytes), names chosen per chip
    (profiling.ncu.plan.plan_metrics)."""
    extra_metrics: tuple[str, ...] = field(
        default=(), metadata={"flags": ("--metrics",), "sep": ",", "metavar": "METRIC"}
    )
    """more ncu metric names, comma separated, appended to the set's --metrics list."""
    replay_mode: str = field(default="kernel", metadata={"choices": REPLAY_MODES})
    """ncu --replay-mode: kernel, application, range or app-range (range modes give one result per
    range, not per kernel)."""
    clock_control: str = field(default="base", metadata={"choices": CLOCK_CONTROLS})
    """ncu --clock-control: base (lock clocks to base, ncu's default) or none (leave clocks alone)."""
    cache_control: str = field(default="all", metadata={"choices": CACHE_CONTROLS})
    """ncu --cache-control: all (flush caches before every replay pass, ncu's default: DRAM bytes are
    cold-cache, measured intensity biased low) or none (keep what the previous pass left)."""
    target_processes: str = field(
        default="all", metadata={"flags": (), "choices": TARGET_PROCESSES}
    )
    """ncu --target-processes: all (the program and its children) or application-only (the program
    only; used with --compile, whose Inductor compile workers ncu must not be injected into)."""
    launch_skip: int = field(default=0, metadata={"parse": optional(int)})
    """ncu --launch-skip: profiled-region kernel launches to skip before profiling."""
    launch_count: int | None = None
    """ncu --launch-count: profile at most this many launches (default: all)."""
    timeout_s: float | None = None
    """stop ncu after this many seconds: SIGINT first (as Ctrl-C: ncu ends the program and writes
    what it has measured), SIGKILL if it is still there 30 s later; the run is FAILED with that
    reason and the partial log kept (default: no limit)."""
    tensor_counters: str = field(default="auto", metadata={"choices": TENSOR_MODES})
    """auto (the chip's sm__ops_path_tensor_* counters where it has them, Turing on; instruction
    counts on Volta; none without tensor cores), ops, inst (sm__inst_executed_pipe_tensor.sum x the
    FLOPs of one tensor instruction, counting.TENSOR_INST_FLOPS: warns on sm_75-89, refused on
    sm_90+) or none."""
    extra_ncu_args: tuple[str, ...] = field(default=(), metadata={"flags": ()})
    """further ncu arguments inserted before the program (advanced; e.g. ("--nvtx-push-pop-scope",
    "process"))."""

    def __post_init__(self) -> None:
        self.extra_metrics = tuple(m.strip() for m in self.extra_metrics if m and m.strip())
        if int(self.profile_steps) < 1:
            raise ValueError(f"profile_steps must be >= 1, got {self.profile_steps}")
        flags.check_choices(self)
        if int(self.launch_skip) < 0:
            raise ValueError(f"launch_skip must be >= 0, got {self.launch_skip}")
        if self.timeout_s is not None and not float(self.timeout_s) > 0:
            raise ValueError(f"timeout_s must be > 0 (or unset), got {self.timeout_s}")
        if self.launch_count is not None and int(self.launch_count) < 1:
            raise ValueError(f"launch_count must be >= 1 (or unset), got {self.launch_count}")
        bad = [
            m for m in self.extra_metrics if not re.fullmatch(r"[A-Za-z0-9_.:^$|()\\*+?\[\]-]+", m)
        ]
        if bad:
            raise ValueError(f"extra_metrics has invalid metric names: {', '.join(bad)}")

    @property
    def legacy_metrics(self) -> list[str]:
        """nvprof-era names among the extra metrics (ncu rejects them)."""
        return [m for m in self.extra_metrics if m.split(".")[0] in LEGACY_NVPROF_METRICS]


def train_argv(
    python: str, config_flags: list[str], profile_steps: int, replay_mode: str = "kernel"
) -> list[str]:
    """The profiled program: `python -m train <config flags> --profile-steps K`, plus
    `--no-cudnn-benchmark` in the application replay modes (cuDNN's autotuner could pick other
    kernels in another pass)."""
    argv = [python, "-m", "train", *config_flags, "--profile-steps", str(int(profile_steps))]
    return argv + (["--no-cudnn-benchmark"] if replay_mode in APPLICATION_REPLAY else [])


def ncu_argv(
    ncu: str,
    log_file: str | os.PathLike,
    metrics: list[str],
    opts: CaptureOptions,
    program: list[str],
) -> list[str]:
    """The whole ncu command as a list (never a shell string)."""
    argv = [
        str(ncu),
        "--profile-from-start",
        "off",
        "--target-processes",
        opts.target_processes,
        "--nvtx",
        "--csv",
        "--page",
        "details",
        "--print-units",
        "base",
        "--log-file",
        str(log_file),
        "--metrics",
        ",".join(metrics),
        "--replay-mode",
        opts.replay_mode,
        "--clock-control",
        opts.clock_control,
        "--cache-control",
        opts.cache_control,
    ]
    if opts.launch_skip:
        argv += ["--launch-skip", str(int(opts.launch_skip))]
    if opts.launch_count is not None:
        argv += ["--launch-count", str(int(opts.launch_count))]
    argv += list(opts.extra_ncu_args)
    return argv + list(program)


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


def ncu_help(ncu: str) -> str:
    """`ncu --help` output, or "" when it cannot be read."""
    try:
        out = subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout or ""


_MODE_LINE = re.compile(r"^(app-range|application|kernel|range)(?![\w-])")


def replay_modes_offered(help_text: str) -> set[str] | None:
    """The replay modes `ncu --help` lists under --replay-mode, None when it lists none (a help
    text in another layout, or none at all: then nothing can be said)."""
    lines = help_text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("--replay-mode")), None)
    if start is None:
        return None
    found: set[str] = set()
    for ln in lines[start + 1 :]:
        text = ln.strip()
        if text.startswith("-") or not text:  # the next option, or the end of the section
            break
        m = _MODE_LINE.match(text)
        if m:
            found.add(m[1])
    return found or None


def check_replay_mode(ncu: str, mode: str, help_text: str | None = None) -> str | None:
    """BenchError when the installed ncu does not offer `mode`; a note when that cannot be told."""
    if mode == "kernel":  # every ncu has it (the default)
        return None
    offered = replay_modes_offered(ncu_help(ncu) if help_text is None else help_text)
    if offered is None:
        return (
            f"could not read the replay modes from `{ncu} --help`: --replay-mode {mode} not checked"
        )
    if mode not in offered:
        raise BenchError(
            f"this ncu ({ncu_version(ncu)}) does not offer --replay-mode {mode} (its --help lists: "
            f"{', '.join(m for m in REPLAY_MODES if m in offered)}): update Nsight Compute or choose one of those"
        )
    return None


CONSOLE_TAIL_LINES = 200
"""Console lines kept besides ncu's own (==PROF==/==WARNING==/==ERROR==): the last ones."""
CONSOLE_NCU_LINES = 2000
"""At most this many of ncu's own console lines are kept (the first ones)."""


@dataclass
class NcuRun:
    """What `run_ncu` saw: the exit code and ncu's console output."""

    returncode: int
    console: str = ""
    timed_out: bool = False
    """ncu ran past its time limit and was stopped (SIGINT, then SIGKILL if needed)."""
    killed: bool = False
    """ncu did not end within STOP_GRACE_S of the SIGINT and was killed (SIGKILL)."""
    """stdout and stderr of ncu and the profiled program, as the user saw them: every ncu line
    (``==PROF==``, ``==WARNING==``, ``==ERROR==``; the first CONSOLE_NCU_LINES) and the last
    CONSOLE_TAIL_LINES other lines, in arrival order (within a stream exact; between stdout
    and stderr only as the two reader threads happen to get them)."""


class _ConsoleBuffer:
    """Thread-safe line buffer fed by the stdout and stderr tees (bounded: training can print a lot)."""

    def __init__(self, tail: int = CONSOLE_TAIL_LINES, ncu_lines: int = CONSOLE_NCU_LINES):
        self._lock = threading.Lock()
        self._seq = 0
        self._ncu: list[tuple[int, str]] = []
        self._ncu_max = ncu_lines
        self._tail: deque[tuple[int, str]] = deque(maxlen=tail)

    def add(self, line: str) -> None:
        line = line.rstrip("\r\n")
        with self._lock:
            self._seq += 1
            if line.lstrip().startswith("=="):
                if len(self._ncu) < self._ncu_max:
                    self._ncu.append((self._seq, line))
            else:
                self._tail.append((self._seq, line))

    def text(self) -> str:
        with self._lock:
            return "\n".join(line for _, line in sorted([*self._ncu, *self._tail]))


def _tee(pipe, stream_name: str, buffer: _ConsoleBuffer) -> None:
    """Copy `pipe` (bytes) to sys.stdout/sys.stderr as it arrives and feed complete lines to `buffer`."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    read = getattr(pipe, "read1", pipe.read)
    while True:
        chunk = read(65536)
        text = decoder.decode(chunk or b"", final=not chunk)
        if text:
            out = getattr(sys, stream_name)  # looked up each time: tests swap the streams
            try:
                out.write(text)
                out.flush()
            except (OSError, ValueError):  # a closed terminal must not stop the buffering
                pass
            pending += text
            *lines, pending = re.split(r"\r\n|\n|\r", pending)
            for line in lines:
                buffer.add(line)
        if not chunk:
            break
    if pending:
        buffer.add(pending)
    pipe.close()


STOP_GRACE_S = 30.0
"""Seconds ncu gets after SIGINT to write what it has before SIGKILL."""


def run_ncu(
    argv: list[str],
    log_file: str | os.PathLike,
    cwd: str | os.PathLike | None = None,
    poll_s: float = 15.0,
    timeout_s: float | None = None,
    grace_s: float = STOP_GRACE_S,
) -> NcuRun:
    """Run ncu, tee its console output (and the profiled program's) to this terminal while keeping
    it for classification (ncu prints some errors only there, not to --log-file); print a progress
    line every `poll_s` seconds; return the exit code and the kept console text.

    Past `timeout_s` seconds (None: no limit) ncu and the program it runs (one process group) get
    SIGINT, as from Ctrl-C, so ncu writes what it has; SIGKILL after `grace_s` more. The same on
    Ctrl-C here, which then goes on as KeyboardInterrupt.

    PYTHONUNBUFFERED=1 is set for the child so the training program's lines still arrive as they
    are printed, now that its stdout is a pipe.
    """
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: the stop reaches the program too
        )
    except OSError as exc:
        raise BenchError(f"cannot start {argv[0]}: {exc.strerror or exc}: {INSTALL_HINT}") from exc
    buffer = _ConsoleBuffer()
    tees = [
        threading.Thread(target=_tee, args=(proc.stdout, "stdout", buffer), daemon=True),
        threading.Thread(target=_tee, args=(proc.stderr, "stderr", buffer), daemon=True),
    ]
    for t in tees:
        t.start()
    try:
        rc, timed_out = _wait(proc, t0, log_file, poll_s, timeout_s)
        killed = False
        if timed_out:
            killed = stop_process_group(proc, grace_s)
            rc = proc.returncode if proc.returncode is not None else -9
    except KeyboardInterrupt:
        stop_process_group(proc, grace_s)
        raise
    for t in tees:  # a leftover grandchild may hold the pipe open: do not wait for it forever
        t.join(timeout=10)
    return NcuRun(rc, buffer.text(), timed_out=timed_out, killed=killed)


def _wait(proc, t0: float, log_file, poll_s: float, timeout_s: float | None):
    """(exit code, False) once `proc` ends, printing a progress line every `poll_s`; (None, True)
    when `timeout_s` seconds since `t0` pass first."""
    while True:
        left = None if timeout_s is None else timeout_s - (time.monotonic() - t0)
        if left is not None and left <= 0:
            return None, True
        try:
            wait_s = poll_s if left is None else max(0.01, min(poll_s, left))
            return proc.wait(timeout=wait_s), False
        except subprocess.TimeoutExpired:
            size = os.path.getsize(log_file) if os.path.exists(log_file) else 0
            console.info(f"  ncu running: {time.monotonic() - t0:.0f} s, log {size / 1e3:.0f} kB")


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> bool:
    """SIGINT to `proc`'s process group (it leads one: start_new_session), SIGKILL to the group
    if `proc` has not ended `grace_s` seconds later; True when it had to be killed."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait_s)
            return sig == signal.SIGKILL
        except subprocess.TimeoutExpired:
            continue
    return True


def timeout_message(
    timeout_s: float, killed: bool, log: str | os.PathLike, grace_s: float = STOP_GRACE_S
) -> str:
    """The one line a profile run that ran past --timeout-s fails with."""
    how = f"SIGINT, then SIGKILL {grace_s:g} s later" if killed else "SIGINT"
    return (
        f"ncu ran past --timeout-s {timeout_s:g} s and was stopped ({how}); what it wrote is kept "
        f"with the run as ncu/{Path(log).name}: raise --timeout-s, or profile fewer kernels "
        "(--launch-count, a smaller --batch or --profile-steps 1)"
    )
