"""The ``--import FILE`` path of `python -m profiling`: an ncu CSV (details or raw page) or a
``.ncu-rep`` report made elsewhere -> the parsed report, the GPU it names and that GPU's chip,
with the file and the chip logged to the run. Works on any machine (no GPU, no ncu).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import console
from common.errors import BenchError
from common.tracking import RunSession
from profiling.chips.counters import ChipCounters
from profiling.gpu import chip_for, chip_tags
from profiling.ncu_counting import chip_id_from_report, device_from_report
from profiling.ncu_names import is_relevant
from profiling.ncu_parse import NcuReport, read_ncu_csv
from profiling.ncu_report_import import is_ncu_rep, load_ncu_rep


def import_report(
    args: argparse.Namespace, session: RunSession
) -> tuple[NcuReport, str, tuple[int, int] | None, ChipCounters | None]:
    """(report, device name, compute capability, chip counters) of ``--import FILE``; the GPU is
    the file's unless --device-name says otherwise (a note when they differ)."""
    path = Path(args.import_file)
    session.log_file(f"ncu/{path.name}", path)
    console.info(f"importing {path} ...")
    if is_ncu_rep(path):
        report = load_ncu_rep(path)
    else:
        report = read_ncu_csv(path, keep=is_relevant)
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
