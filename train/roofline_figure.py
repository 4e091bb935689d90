"""`roofline.png` of a train run: the run's point against its device's ceilings."""

from __future__ import annotations

from pathlib import Path

from common import console
from common.errors import one_line
from train.config import TrainConfig


def log_roofline(session, cfg: TrainConfig, device_name: str, metrics: dict, tmp: Path) -> None:
    """Log `roofline.png`: this run against its device's ceilings (the latest peaks run of the
    device on this server, else the vendor table; roofline/run_plot.py). Tag `roofline_roof`
    says where the ceilings came from (`measured: peaks run <id>`, `vendor: <source>`), or why
    there is no figure. A failure here is one warning, never a failed run."""
    try:
        from roofline import run_plot as run_roofline
        from roofline.vendor import load_vendor_lookup

        peaks = None
        if not session.offline:
            from roofline.store import latest_peaks_row

            peaks = latest_peaks_row(device_name, cfg.env_label)
        roof = run_roofline.run_roof(device_name, peaks, load_vendor_lookup()(device_name))
        if roof is None:
            session.set_tags(
                {"roofline_roof": f"none: no peaks run or vendor entry for {device_name}"}
            )
            return
        image = run_roofline.png(
            roof,
            cfg.precision,
            metrics["achieved_flops_per_s"],
            metrics["modeled_intensity_flops_per_byte"],
            f"{cfg.config_label()} on {device_name}",
        )
        path = tmp / "roofline.png"
        path.write_bytes(image)
        session.log_file("roofline.png", path)
        session.set_tags({"roofline_roof": "; ".join(sorted(set(roof.sources.values())))})
    except Exception as exc:  # noqa: BLE001 - a figure never fails the measured run
        console.warn(f"no roofline.png for this run: {one_line(exc)[:300]}")
