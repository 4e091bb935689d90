"""A profile run's per-module rows: the edge that logs what profiling/breakdown/ncu.py computes
from a capture with module NVTX ranges (python -m profiling calls it when the kernels carry
them)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from common import console
from common.errors import one_line
from profiling.breakdown import figures, names
from profiling.breakdown.above import above_roof
from profiling.breakdown.ncu import kernel_points, ncu_rows
from profiling.breakdown.roof import device_ceilings
from profiling.breakdown.text import layers_csv


def log_ncu_layers(session, report, summary, cfg, device_name: str) -> None:
    """A profile run of a capture with module ranges (--nvtx-modules): `layers.csv` with measured
    FLOPs and DRAM bytes per module and phase, `layer_roofline.png` (a point per module) and
    `kernel_roofline.png` (a point per kernel, area its time), against the device's ceilings.
    A failure here is one warning: the profile run stands without them."""
    try:
        ceilings = device_ceilings(
            device_name, cfg.env_label, cfg.precision, online=not session.offline
        )
        per_kernel = summary.kernels.to_dict("records")
        table, owners = ncu_rows(report.kernels, per_kernel, ceilings)
        session.log_text("layers.csv", layers_csv(table))
        total = sum(r["self_time_s"] for r in table)
        about = (
            f"{cfg.config_label()} on {device_name}, ncu kernel time (replayed, not training time)"
        )
        what = "ncu kernel time"
        kernels = kernel_points(per_kernel, owners, total)
        above = above_roof(table, ceilings, "ncu")
        above_k = above_roof(kernels, ceilings, "ncu")
        clock = "ncu kernel time (replayed)"
        tmp = _scratch()
        for name, image in (
            (
                "layer_roofline.png",
                figures.layer_roofline(table, ceilings, about, what, above=above, clock=clock),
            ),
            (
                "kernel_roofline.png",
                figures.layer_roofline(
                    kernels, ceilings, about, what, unit="kernels", above=above_k, clock=clock
                ),
            ),
        ):
            (tmp / name).write_bytes(image)
            session.log_file(name, tmp / name)
        modules = {o for o in owners if o[0] not in names.SPECIAL_ROWS}
        session.set_tags(
            {
                "breakdown_modules": f"{len(modules)} module rows from {len(owners)} kernels",
                "breakdown_roof": ceilings.source or f"none: {ceilings.why}",
                **{
                    tag: a.sentence[:4900]
                    for tag, a in (("breakdown_above_roof", above), ("kernels_above_roof", above_k))
                    if a is not None
                },
            }
        )
    except Exception as exc:  # noqa: BLE001 - the counters stand without the per-module rows
        console.warn(f"no layers.csv for the module ranges: {one_line(exc)[:300]}")


def _scratch() -> Path:
    """A folder for figures the session sends when it flushes or ends (removed at exit)."""
    tmp = Path(tempfile.mkdtemp(prefix="breakdown-"))
    atexit.register(shutil.rmtree, tmp, True)
    return tmp
