"""`roofline.png` of a train run: the run's point against its device's ceilings, with its bound
and fraction of roof as tags, a metric and a line of its description (roofline/run_plot.py)."""

from __future__ import annotations

from pathlib import Path

from common import console, schema
from common.errors import one_line


def log_roofline(session, precision: str, metrics: dict, tmp: Path) -> str:
    """Log `roofline.png`: the run of `session` (its device, environment and config as its tags
    name them; `precision`'s ceiling) against its device's ceilings (its peaks runs on this server,
    chosen as analysis chooses them: roofline/ceilings.py; else the vendor table), tag `bound` and metric `fraction_of_roof`. Tag
    `roofline_roof` says where the ceilings came from (`measured: peaks run <id>`, `vendor:
    <source>`), or why there is no figure (a later `python -m analysis` draws it once the device
    has ceilings). Returns the description's 'Roofline: ...' line. A failure here is one warning,
    never a failed run."""
    tags = session.record.tags
    device_name = tags[schema.TAG_DEVICE_NAME]
    try:
        from roofline import run_plot  # matplotlib, imported when a run draws its figure
        from roofline.vendor import load_vendor_lookup

        peaks = None
        if not session.offline:
            from roofline.store import measured_roof

            peaks = measured_roof(device_name, tags[schema.TAG_ENV_LABEL])
        roof = run_plot.run_roof(device_name, peaks, load_vendor_lookup()(device_name))
        if roof is None:
            reason = f"none: no peaks run or vendor entry for {device_name}"
            session.set_tags({run_plot.TAG_ROOF: reason})
            return (
                f"{run_plot.NOTE_PREFIX}no ceilings for {device_name} yet (`python -m "
                "profiling.peaks` measures them; the next `python -m analysis` then draws it)."
            )
        figure = run_plot.run_figure(
            roof,
            precision,
            metrics["achieved_flops_per_s"],
            metrics["modeled_intensity_flops_per_byte"],
            f"{tags[schema.TAG_CONFIG_LABEL]} on {device_name}",
        )
        path = tmp / "roofline.png"
        path.write_bytes(figure.png)
        session.log_file("roofline.png", path)
        session.set_tags(figure.tags)
        session.log_metrics(figure.metrics)
        return figure.line
    except Exception as exc:  # noqa: BLE001 - a figure never fails the measured run
        console.warn(f"no roofline.png for this run: {one_line(exc)[:300]}")
        return ""
