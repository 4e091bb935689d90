"""The ``--import FILE`` path of `python -m profiling`: an ncu CSV (details or raw page) or a
``.ncu-rep`` report made elsewhere -> the parsed report, the GPU it names and that GPU's chip,
with the file and the chip logged to the run. Works on any machine (no GPU, no ncu).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import console
from common.errors import BenchError, UsageError
from common.tracking import RunSession
from profiling.ncu.chips.counters import ChipCounters
from profiling.ncu.counting import chip_id_from_report, device_from_report
from profiling.ncu.gpu import chip_for, chip_tags
from profiling.ncu.names import is_relevant
from profiling.ncu.parse import NcuReport, read_ncu_csv, refuse_truncated
from profiling.ncu.report_import import is_ncu_rep, load_ncu_rep

MAX_IMPORT_BYTES = 2 * 1024**3
"""the largest file --import reads (read whole, then stored as an artifact): ncu's CSV of a whole
profiled training step is megabytes, a --set full export of thousands of kernels hundreds."""


def check_import_file(name: str) -> None:
    """UsageError, before any run exists, when `name` is no file --import could read."""
    path = Path(name)
    if path.is_dir():
        raise UsageError(
            f"--import {name} is a folder: pass the ncu CSV or .ncu-rep file itself "
            f"(e.g. {name.rstrip('/')}/report.csv)"
        )
    if not path.is_file():
        raise UsageError(f"--import {name}: no such file")
    size = path.stat().st_size
    if size > MAX_IMPORT_BYTES:
        raise UsageError(
            f"--import {name} is {size / 1024**3:.3g} GiB, more than the {MAX_IMPORT_BYTES / 1024**3:.3g}"
            " GiB an ncu CSV or .ncu-rep of a profiled training step holds: export only the "
            "profiled step (ncu --launch-skip/--launch-count, --metrics) or check that it is the right file"
        )


def import_report(
    args: argparse.Namespace, session: RunSession
) -> tuple[NcuReport, str, tuple[int, int] | None, ChipCounters | None]:
    """(report, device name, compute capability, chip counters) of ``--import FILE``; the GPU is
    the file's unless --device-name says otherwise (a note when they differ)."""
    path = Path(args.import_file)
    console.info(f"importing {path} ...")
    if is_ncu_rep(path):
        report = load_ncu_rep(path)
    else:
        report = read_ncu_csv(path, keep=is_relevant)
    session.log_file(f"ncu/{path.name}", path)  # only what parsed as ncu output is stored
    refuse_truncated(report, args.allow_truncated)
    name, cap = device_from_report(report)
    cap = cap or args.compute_capability
    device_name = args.device_name or name
    if not device_name:
        raise BenchError(
            f"{path.name} does not name its GPU: pass --device-name as torch.cuda.get_device_name() "
            'reports it on the profiled machine, e.g. --device-name "NVIDIA L4"'
        )
    if args.device_name and name and args.device_name != name:
        console.note(
            f"{path.name} says the GPU is {name!r}; logging --device-name {args.device_name!r}"
        )
    choice, counters = chip_for(device_name, cap, chip_id_from_report(report))
    extra = {"ncu_import_file": path.name, "ncu_page": report.page, **chip_tags(choice, counters)}
    if cap:
        extra["cuda_capability"] = f"{cap[0]}.{cap[1]}"
    session.set_tags(extra)
    return report, device_name, cap, counters
