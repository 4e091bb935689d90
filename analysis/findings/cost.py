"""USD per training sample and energy per sample of a configuration. Pure.

USD per 1 M samples = usd_per_hour x devices / 3600 / samples_per_s x 1e6, and per ImageNet-1k
epoch the same for 1,281,167 samples. samples/s derives from the mean step time (GUIDE decision:
every rate from the mean), so the cost is proportional to the mean step time and carries its 95 %
confidence interval: one run -> its `step_time_ci95_rel`; several runs -> the CI of the mean of
their mean step times (Student t). `devices`: the data-parallel world size on GPUs (one GPU per
process); 1 on a CPU, where every process shares the one priced machine.
"""

from __future__ import annotations

from analysis.findings.prices import IMAGENET_1K_TRAIN_IMAGES, PriceTable
from analysis.findings.records import Finding
from analysis.findings.values import Clean
from train.timing import ci95_half_width_rel

NO_ENERGY = (
    "not measured: these train runs record no energy (logged before train runs measured it, or "
    "data-parallel runs, which do not yet)"
)


def ci95_rel(runs: list[dict], clean: Clean) -> float | None:
    """Relative 95 % CI half-width of the config's mean step time (see the module docstring)."""
    if len(runs) == 1:
        r = runs[0]
        return clean.value(
            r.get("step_time_ci95_rel"), "step_time_ci95_rel", f"train run {r['run_id'][:8]}"
        )
    means = [
        m
        for r in runs
        if (
            m := clean.value(
                r.get("step_time_mean_s"), "step_time_mean_s", f"train run {r['run_id'][:8]}", True
            )
        )
    ]
    return ci95_half_width_rel(means) if len(means) >= 2 else None


def cost(
    env: str,
    device: str,
    device_type: str,
    world_size: float,
    samples_per_s: float | None,
    ci_rel: float | None,
    prices: PriceTable,
) -> tuple[dict, Finding | None]:
    """The cost fields of a config record, and its cost finding (None without a price)."""
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
        fields["usd_per_million_samples_ci95"] = [million * (1 - ci_rel), million * (1 + ci_rel)]
        fields["usd_per_imagenet_epoch_ci95"] = [epoch * (1 - ci_rel), epoch * (1 + ci_rel)]
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


def energy(runs: list[dict], clean: Clean) -> tuple[dict, Finding | None]:
    """Mean energy per sample over the runs that measured it, or null with the note saying why
    (the latest run's note)."""
    runs = sorted(runs, key=lambda r: r.get("start_time") or 0)
    vals, sources = [], []
    for r in runs:
        where = f"train run {r['run_id'][:8]}"
        e = clean.value(r.get("energy_j_per_sample"), "energy_j_per_sample", where)
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
