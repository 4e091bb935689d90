"""One record of facts per configuration (a point of analysis/core.py), built in one pass: what every
findings rule reads, so a rule takes a record and its peers instead of parallel dicts keyed by
index. Numbers are the configuration's one statistic (docs/schema.md, "Definitions"): samples/s
from the pooled mean step time, the fraction of roof and bound at that point, and how much its
runs disagree. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from analysis.findings import rules
from analysis.findings.breakdown import Breakdown
from common.stats import as_float
from common import schema
from common.fmt import ci95

SERIES_KEYS = schema.comparison_keys("batch_size")
"""a batch series: points equal in all of these (same place, model and config), differing in batch."""


@dataclass(frozen=True)
class Facts:
    """What the findings know about one configuration (one point)."""

    idx: int
    point: dict
    """the joined point (analysis.points row): knobs, ceiling, bound, fraction of roof."""
    runs: tuple[dict, ...]
    """its train runs (analysis.train rows)."""
    throughput: float | None
    """samples/s = batch x world size / step_s."""
    step_s: float | None
    """mean step time over all measured steps of its runs."""
    step_ci_rel: float | None
    """relative half-width of the 95 % CI of step_s (over its runs; one run: its own)."""
    fraction: float | None
    """fraction of roof at this point (may be over 1: then the ceiling is too low; the findings
    state `roof_fraction`)."""
    breakdown: Breakdown | None = None
    fit: dict | None = None
    """the guarded fixed-time fit of its batch series (bound.fixed_time_fits), or None."""
    unstable: str = ""
    """why its runs disagree too much to judge it ('' when they agree)."""
    device_type: str = ""
    profile: dict | None = None
    """its profile run (analysis/roofs.py profile_intensities' run): {run_id, flops_total,
    steps}, or None."""
    noise_rel: float = 0.0
    """for a configuration of one run: how much repeats of other configurations on the same
    environment and device disagree (the log of their largest highest-over-lowest run ratio), as
    a floor under its own CI when it is compared (`ratio_ci`): one run's CI says nothing of how
    runs differ."""

    @property
    def ratio_ci(self) -> float | None:
        """The relative 95 % half-width its comparisons use: its step-time CI, with a one-run
        configuration's raised to the machine's run-to-run noise (noise_rel)."""
        if self.step_ci_rel is None:
            return None
        return max(self.step_ci_rel, self.noise_rel) if len(self.runs) == 1 else self.step_ci_rel

    @property
    def env(self) -> str:
        return str(self.point["env_label"])

    @property
    def device(self) -> str:
        return str(self.point["device_name"])

    @property
    def label(self) -> str:
        return str(self.point["label"])

    @property
    def run_ids(self) -> list[str]:
        return list(self.point["run_ids"])

    @property
    def spread(self) -> float | None:
        """highest over lowest run samples/s (1 for one run): the point's throughput_spread_ratio."""
        x = as_float(self.point.get("throughput_spread_ratio"))
        return x if x is not None and x >= 1 else None

    @property
    def above_roof(self) -> bool:
        return self.fraction is not None and self.fraction > 1

    @property
    def roof_fraction(self) -> float | None:
        """The fraction of roof the findings state: none above the roof (the ceiling is too low,
        `ceiling_low` says so); an unstable configuration's is stated as the run's page states
        it, and every table marks it unreliable."""
        return None if self.above_roof else self.fraction

    @property
    def headroom(self) -> float | None:
        """1 / roof_fraction: the factor the roof still allows."""
        frac = self.roof_fraction
        return 1 / frac if frac else None

    def key(self, keys) -> tuple:
        return tuple(norm(self.point.get(k, "")) for k in keys)

    def same_model_and_device(self, other: "Facts") -> bool:
        """Comparisons across configurations hold only within one model on one device name."""
        return self.device == other.device and norm(self.point.get("model")) == norm(
            other.point.get("model")
        )


def norm(v) -> str:
    """A knob's value for comparing: numbers as numbers ('32' == '32.0'), text lower-case."""
    try:
        x = float(v)
        return repr(x) if math.isfinite(x) else str(v)
    except (TypeError, ValueError):
        return str(v).strip().lower()


def build(analysis, breakdowns: dict) -> list[Facts]:
    """The facts of every point of `analysis` (core.Analysis); `breakdowns`: (env, device,
    config_key) -> Breakdown."""
    by_run = {r["run_id"]: r for r in _rows(analysis.train)}
    out = []
    for idx, p in enumerate(analysis.points.to_dict("records")):
        runs = tuple(by_run[r] for r in p["run_ids"] if r in by_run)
        f = Facts(
            idx=idx,
            point=p,
            runs=runs,
            throughput=as_float(p.get("throughput_mean_samples_per_s"), positive=True),
            step_s=as_float(p.get("step_time_mean_s"), positive=True),
            step_ci_rel=as_float(p.get("step_time_ci95_rel"), nonnegative=True),
            fraction=as_float(p.get("fraction_of_roof"), positive=True),
            breakdown=breakdowns.get((p["env_label"], p["device_name"], p["config_key"])),
            device_type=next((str(r["device_type"]) for r in runs if r.get("device_type")), ""),
            profile=_profile(p),
        )
        out.append(replace(f, unstable=instability(f)))
    return with_noise(out)


def with_noise(found: list[Facts]) -> list[Facts]:
    """Each one-run configuration's noise_rel: the log of the largest run-to-run ratio among the
    repeated configurations of its environment and device."""
    worst: dict[tuple, float] = {}
    for f in found:
        lo, hi = _disagreement(f)
        key = (f.env, f.device)
        worst[key] = max(worst.get(key, 0.0), math.log(hi / lo))
    return [
        replace(f, noise_rel=worst[(f.env, f.device)]) if len(f.runs) == 1 else f for f in found
    ]


def _rows(train) -> list[dict]:
    """train's rows as dicts, by whole columns (to_dict("records") boxes each value of a
    pyarrow-backed string column one at a time: 1 s over 100,000 runs here)."""
    cols = list(train.columns)
    values = [train[c].tolist() for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


def _profile(p: dict) -> dict | None:
    """The point's profile run: its id, FLOPs and steps, or None when it has none."""
    run_id = p.get("profile_run_id") or ""
    if not run_id:
        return None
    return {
        "run_id": run_id,
        "flops_total": p.get("profile_flops_total"),
        "steps": p.get("profile_steps"),
    }


def run_step(r: dict) -> float | None:
    """One run's logged mean step time, or None."""
    return as_float(r.get("step_time_mean_s"), positive=True)


def run_rate(r: dict) -> float | None:
    """One run's own samples/s, as the join computed it (analysis/join.py run_rates)."""
    return as_float(r.get("run_samples_per_s"), positive=True)


def instability(f: Facts) -> str:
    """Why the runs of `f` disagree too much to judge it, or '': their samples/s spread over
    rules.UNSTABLE_SPREAD (highest over lowest run of the same loader workers), or its step-time
    CI wider than rules.UNSTABLE_CI (where its runs all used the same workers)."""
    why = []
    lo, hi = _disagreement(f)
    if hi / lo > rules.UNSTABLE_SPREAD:
        why.append(
            f"its runs' samples/s range {lo:.4g}-{hi:.4g} (×{hi / lo:.3g}, over "
            f"×{rules.UNSTABLE_SPREAD:g})"
        )
    workers = {str(r.get("workers") or "") for r in f.runs}
    if f.step_ci_rel is not None and f.step_ci_rel > rules.UNSTABLE_CI and len(workers) == 1:
        why.append(f"its mean step time's {ci95(f.step_ci_rel)} is over ±{rules.UNSTABLE_CI:.0%}")
    return "; ".join(why)


def _disagreement(f: Facts) -> tuple[float, float]:
    """(lowest, highest) samples/s of the runs of `f` that used the same number of loader
    workers, over the workers values (runs that differ in workers are a measured move,
    moves.worker_moves, not noise); (1, 1) with fewer than two such runs."""
    groups: dict[str, list[float]] = {}
    for r in f.runs:
        if (x := run_rate(r)) is not None:
            groups.setdefault(str(r.get("workers") or ""), []).append(x)
    pairs = [(min(g), max(g)) for g in groups.values() if len(g) >= 2]
    return max(pairs, key=lambda p: p[1] / p[0]) if pairs else (1.0, 1.0)


@dataclass
class Peers:
    """Facts grouped for the cross-configuration rules: by batch series and by one-knob siblings."""

    all: list[Facts]
    by_keys: dict[tuple, dict[tuple, list[Facts]]] = field(default_factory=dict)

    def like(self, f: Facts, keys) -> list[Facts]:
        """The other facts equal to `f` in `keys` (always the same model and device name)."""
        keys = tuple(keys)
        if keys not in self.by_keys:
            groups: dict[tuple, list[Facts]] = {}
            for g in self.all:
                groups.setdefault(g.key(keys), []).append(g)
            self.by_keys[keys] = groups
        return [
            g
            for g in self.by_keys[keys].get(f.key(keys), [])
            if g is not f and f.same_model_and_device(g)
        ]
