"""The ``--import PATH ...`` path of `python -m profiling`: ncu CSVs (details or raw page, gzipped
or not), ``.ncu-rep`` reports or folders of them made elsewhere -> one parsed report (a capture
set, profiling.ncu.capture_set), the GPU it names and that GPU's chip, with the files and the chip
logged to the run. Works on any machine (no GPU, no ncu).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import console
from common.errors import BenchError
from profiling.ncu.capture_set import check_import_paths, combine, phases_of, read_files, set_name
from profiling.ncu.chips.counters import ChipCounters
from profiling.ncu.chips.devices import chip_capability
from profiling.ncu.counting import chip_id_from_report, device_from_report
from profiling.ncu.gpu import chip_for, chip_tags
from profiling.ncu.parse import NcuReport

MAX_IMPORT_BYTES = 2 * 1024**3
"""the largest file --import reads (read whole, then stored as an artifact): ncu's CSV of a whole
profiled training step is megabytes, a --set full export of thousands of kernels hundreds."""


def import_paths(args: argparse.Namespace) -> list[str]:
    """The PATHs of --import (none: [], also for MLproject's empty value)."""
    return [p for p in (args.import_file or []) if p]


def check_import_file(args: argparse.Namespace) -> None:
    """UsageError, before any run exists, when a PATH of --import is nothing --import could read
    or the --phase labels do not fit the paths."""
    paths = import_paths(args)
    check_import_paths(paths, MAX_IMPORT_BYTES, phases_of(paths, args.phase))


def import_report(
    args: argparse.Namespace,
) -> tuple[NcuReport, str, tuple[int, int] | None, ChipCounters | None, dict, list[Path]]:
    """(report, device name, compute capability, chip counters, the run's tags, the files that
    parsed as ncu output) of ``--import PATH ...``: every file read and merged
    (profiling.ncu.capture_set) before any run exists (profiling/cli.py); the GPU is the
    files' unless --device-name says otherwise (a note when they differ), the capability the
    files', else --compute-capability, else the chip's."""
    paths = import_paths(args)
    console.info(f"importing {' '.join(paths)} ...")
    files = read_files(paths, phases_of(paths, args.phase), args.allow_truncated)
    name_of_set = set_name(paths, files)
    report = combine(files, name_of_set)
    name, cap = device_from_report(report)
    cap = cap or args.compute_capability
    device_name = args.device_name or name
    if not device_name:
        raise BenchError(
            f"{name_of_set} does not name its GPU: pass --device-name as torch.cuda.get_device_name() "
            'reports it on the profiled machine, e.g. --device-name "NVIDIA L4"'
        )
    if args.device_name and name and args.device_name != name:
        console.note(
            f"{name_of_set} says the GPU is {name!r}; logging --device-name {args.device_name!r}"
        )
    choice, counters = chip_for(device_name, cap, chip_id_from_report(report))
    if cap is None and chip_capability(choice.chip):
        cap = chip_capability(choice.chip)
        console.note(f"{device_name!r} is a {choice.chip}: compute capability {cap[0]}.{cap[1]}")
    extra = {
        "ncu_import_file": name_of_set[:250],
        "ncu_page": report.page,
        **chip_tags(choice, counters),
    }
    if cap:
        extra["cuda_capability"] = f"{cap[0]}.{cap[1]}"
    return report, device_name, cap, counters, extra, [f.path for f in files]
