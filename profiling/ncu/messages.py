"""ncu's failures as one line: the reason a capture (or a saved log of one) failed, from what ncu
printed and its exit code.

Pure: no mlflow, no file writes. The capture path (profiling.cli), the CSV parser
(profiling.ncu.parse) and the .ncu-rep reader (profiling.ncu.report_import) all use it, so a log
saved from a failed run elsewhere gets the same reason as a failed capture here.
"""

from __future__ import annotations

import re
from typing import Iterable

# The nvprof-era names of the course brief's seed set; Nsight Compute has no such metrics.
LEGACY_NVPROF_METRICS = ("flop_count_sp", "flop_count_hp", "flop_count_dp")

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
    r"Failed to find metric\s+(?:regex:)?\^?(?P<name>[A-Za-z0-9_]+(?:\\?\.[A-Za-z0-9_]+)*)",
    re.IGNORECASE,
)
_APP_ERROR = re.compile(
    r"The application returned an error code \((?P<code>-?\d+)\)", re.IGNORECASE
)


def legacy_message(names: list[str]) -> str:
    return (
        f"ncu rejects {', '.join(names)}: these are nvprof-era metric names (the course brief's seed set) "
        "that Nsight Compute does not have; use --metric-set roofline, which counts FLOPs from "
        "sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum (docs/profiling.md)"
    )


def classify_ncu_output(text: str, returncode: int | None = 0) -> str | None:
    """The one-line reason an ncu run failed, from its output (log file and/or console) and exit
    code; None when it looks fine. `returncode=None` means "unknown" (an imported file).

    Checked in order: counter permission, unknown (incl. nvprof-era) metrics, the profiled program
    failing, no kernels profiled, any other ==ERROR== or non-zero exit. Pure: the capture path
    (profiling.cli) and the import path (parse_ncu_csv, profiling.ncu.report_import) both use it.
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
            f"the profiled program failed under ncu (exit code {app['code']}): read its output and try "
            "the same `python -m train ... --profile-steps K` without ncu"
        )
    if re.search(r"No kernels were profiled", text, re.IGNORECASE):
        return NO_KERNELS_MESSAGE
    errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("==ERROR==")]
    if errors:
        return f"ncu failed: {errors[-1][len('==ERROR==') :].strip()}"
    if returncode not in (0, None):
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        return f"ncu exited with code {returncode}: {last[:300]}"
    return None


def messages_reason(source: str, messages: Iterable[str]) -> str | None:
    """For a file holding ncu's messages (a log saved from a run elsewhere) but no results: the
    same one-line reason a failed capture gets, naming the file; None when they say nothing wrong."""
    reason = classify_ncu_output("\n".join(messages), None)
    return f"{source} holds ncu's messages but no counter table: {reason}" if reason else None
