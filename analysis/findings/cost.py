"""USD per training sample and energy per sample of a configuration. Pure.

USD per 1 M samples = usd_per_hour x devices / 3600 / samples_per_s x 1e6, and per ImageNet-1k
epoch the same for 1,281,167 samples. samples/s derives from the mean step time (GUIDE decision:
every rate from the mean), so the cost is proportional to the mean step time and carries its 95 %
confidence interval (the configuration's step_time_ci95_rel, analysis/join.py: one run -> its own;
several runs -> over their mean step times, Student t), taken on the log scale so that it never
goes below 0 (common.stats.log_interval). `devices`: the data-parallel world size on GPUs (one GPU per
process); 1 on a CPU, where every process shares the one priced machine.
"""

from __future__ import annotations

from analysis.findings.prices import IMAGENET_1K_TRAIN_IMAGES, PriceTable
from analysis.findings.records import Finding
from common.stats import as_float, log_interval

NO_ENERGY = (
    "not measured: these train runs record no energy (logged before train runs measured it, or "
    "data-parallel runs, which do not yet)"
)


def cost(
    env: str,
    device: str,
    device_type: str,
    world_size: float,
    rate: tuple[float | None, float | None],
    prices: PriceTable,
) -> tuple[dict, Finding | None]:
    """The cost fields of a config record, and its cost finding (None without a price); `rate`:
    (samples/s, the relative 95 % half-width of its mean step time)."""
    samples_per_s, ci_rel = rate
    price = prices.lookup(env, device)
    devices = int(world_size) if device_type == "cuda" and world_size and world_size > 1 else 1
    fields = {
        "usd_per_hour": None,
        "price_source": None,
        "usd_per_million_samples": None,
        "usd_per_million_samples_ci95": None,
        "usd_per_imagenet_epoch": None,
        "usd_per_imagenet_epoch_ci95": None,
    }
    if price is None:
        fields["price_note"] = (
            f"no price for env {env!r} or device {device!r}: give one with --prices"
        )
        return fields, None
    if not samples_per_s:
        fields["price_note"] = "no usable samples/s: no cost"
        return fields, None
    per_s = price.usd_per_hour * devices / 3600
    million = per_s / samples_per_s * 1e6
    epoch = per_s / samples_per_s * IMAGENET_1K_TRAIN_IMAGES
    fields.update(
        usd_per_hour=price.usd_per_hour * devices,
        price_source=price.source,
        usd_per_million_samples=million,
        usd_per_imagenet_epoch=epoch,
    )
    if ci_rel is not None:
        fields["usd_per_million_samples_ci95"] = log_interval(million, ci_rel)
        fields["usd_per_imagenet_epoch_ci95"] = log_interval(epoch, ci_rel)
    values = {
        "usd_per_hour": price.usd_per_hour,
        "devices": devices,
        "price_source": price.source,
        "usd_per_million_samples": million,
        "usd_per_imagenet_epoch": epoch,
        "ci95_rel": ci_rel,
        "samples_per_s": samples_per_s,
    }
    return fields, Finding("cost", "cost", values, [])


def energy(runs: list[dict]) -> tuple[dict, Finding | None]:
    """Mean energy per sample over the runs that measured it, or null with the note saying why
    (the latest run's note)."""
    runs = sorted(runs, key=lambda r: r.get("start_time") or 0)
    vals, sources = [], []
    for r in runs:
        e = as_float(r.get("energy_j_per_sample"), nonnegative=True)
        if e is not None:
            vals.append(e)
            sources.append(r.get("energy_source") or "")
    notes = [n for r in runs if (n := r.get("energy_note"))]
    if vals:
        e = sum(vals) / len(vals)
        src = sources[-1] or "energy counter"
        fields = {
            "energy_j_per_sample": e,
            "energy_source": src,
            "energy_note": notes[-1] if notes else None,
        }
        finding = Finding(
            "energy",
            "cost",
            {"energy_j_per_sample": e, "energy_source": src, "runs": len(vals)},
            [],
        )
        return fields, finding
    note = notes[-1] if notes else NO_ENERGY
    return {"energy_j_per_sample": None, "energy_source": None, "energy_note": note}, None
