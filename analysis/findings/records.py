"""A finding is a record: what kind it is, the measured values it rests on (raw SI), the run ids
they come from, and a weight that ranks it. Its sentence is rendered from the record here and
nowhere else, so every number a sentence names is one of the record's values."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Callable

from common.fmt import num, pct, short_id, si
from profiling.breakdown.names import row_label


@dataclass
class Finding:
    kind: str
    topic: str
    values: dict
    run_ids: list[str] = field(default_factory=list)
    weight: float = 0.0
    """ranking for the headline: the log of the factor it could gain, or how large the anomaly is."""

    def sentence(self) -> str:
        """The finding's words; a move a what-if checked ends with its check (analysis/whatif.py)."""
        text = SENTENCES[self.kind](self.values)
        check = self.values.get("check")
        return f"{text} Checked by a what-if: {check}." if check else text

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "sentence": self.sentence(),
            "values": {k: plain(v) for k, v in self.values.items()},
            "run_ids": list(self.run_ids),
        }


def plain(v):
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, containers recursively."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def json_text(doc: dict) -> str:
    """findings.json's text: `doc`'s lists one item a line (json's C encoder writes each line; with
    indent= json falls back to its pure-Python encoder, about 1 s over 10,000 runs here)."""
    parts = []
    for k, v in doc.items():
        if isinstance(v, list) and v:
            items = ",\n".join(json.dumps(x, allow_nan=False) for x in v)
            parts.append(f"{json.dumps(k)}: [\n{items}\n]")
        else:
            parts.append(f"{json.dumps(k)}: {json.dumps(v, allow_nan=False)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def ms(seconds: float) -> str:
    return f"{num(seconds * 1e3)} ms"


def times(x: float) -> str:
    return f"×{num(x)}"


# ------------------------------------------------------------------------------ sentences
def _bound(v: dict) -> str:
    b = v["bound"]
    roof = (
        f"{pct(v['fraction_of_roof'])} of its {v['ceiling_kind']} {v['ceiling_dtype']} roof"
        if v.get("fraction_of_roof") is not None and math.isfinite(v["fraction_of_roof"])
        else "no fraction of roof (its ceiling is below what it achieved: too low)"
        if v.get("ceiling_too_low")
        else "no fraction of roof (no ceiling)"
    )
    head = (
        f", headroom {times(v['headroom_factor'])}"
        if v.get("headroom_factor") is not None and math.isfinite(v["headroom_factor"])
        else ""
    )
    if b in ("compute", "memory"):
        side = "at or right of" if b == "compute" else "left of"
        reach = (
            f"it reaches {roof}"
            if v.get("ceiling_too_low")
            else f"it reaches {roof} ({si(v['achieved_flops_per_s'], 'FLOP/s')} of "
            f"{si(v['attainable_flops_per_s'], 'FLOP/s')} attainable)"
        )
        return (
            f"{b}-bound: at {num(v['intensity_flops_per_byte'])} FLOP/byte "
            f"({v['intensity_source']} intensity) it sits {side} the ridge "
            f"({num(v['ridge_flops_per_byte'])} FLOP/byte); {reach}{head}."
        )
    if b == "latency":
        return (
            f"latency/launch-bound: {pct(v['fixed_share'])} of its {ms(v['step_time_s'])} step is "
            f"fixed per-step time ({ms(v['fixed_step_s'])} ± {ms(v['fixed_step_ci95_s'])} at 95%, "
            f"the intercept of step time against batch over {v['fit_runs']} runs at batches "
            f"{', '.join(str(int(b)) for b in v['batches'])}); {roof}{head}."
        )
    if b == "data":
        return (
            f"data-bound: it waits for data {pct(v['data_share'])} of the step (breakdown run "
            f"{short_id(v['breakdown_run'])}); {roof}{head}."
        )
    if b == "host":
        return (
            f"host-bound: host overhead is {pct(v['host_share'])} of the step (breakdown run "
            f"{short_id(v['breakdown_run'])}); {roof}{head}."
        )
    return f"bound unknown: {v.get('why', 'no ceiling and no breakdown')}."


def _roof_far(v: dict) -> str:
    return (
        f"at {pct(v['fraction_of_roof'])} of its roof the roof is not what holds it back "
        f"(headroom {times(v['headroom_factor'])}); nothing measured here says what does: a "
        "breakdown run of this config would."
    )


KNOB_TEXT = {
    "precision": lambda a, b: f"{b} instead of {a}",
    "batch_size": lambda a, b: f"batch {int(float(b))} instead of {int(float(a))}",
    "channels_last": lambda a, b: f"channels_last {_onoff(b)} instead of {_onoff(a)}",
    "compile": lambda a, b: f"torch.compile {_onoff(b)} instead of {_onoff(a)}",
    "workers": lambda a, b: f"{b} loader workers instead of {a}",
}


def _onoff(x) -> str:
    return "on" if str(x).lower() in ("true", "1", "yes") else "off"


def _speedup(v: dict) -> str:
    ci = v.get("speedup_ci95")
    ci = f" (95% CI ×{num(ci[0])}–{num(ci[1])})" if ci else ""
    return (
        f"{KNOB_TEXT[v['knob']](v['from'], v['to'])}: {times(v['speedup'])}{ci} samples/s "
        f"({num(v['throughput_to'])} vs {num(v['throughput_from'])} samples/s, measured)."
    )


def _peak_ratio(v: dict) -> str:
    return (
        f"no {v['to']} run of this config; the device's measured {v['to']}/{v['from']} peak ratio "
        f"is {times(v['ratio'])} ({si(v['peak_to'], 'FLOP/s')} vs {si(v['peak_from'], 'FLOP/s')}, "
        f"peaks run {short_id(v['peaks_run'])}): the most {v['to']} could give compute-bound work."
    )


def _fusion(v: dict) -> str:
    return (
        f"memory-bound normalisation and elementwise layers take {pct(v['share'])} of the step "
        f"({v['layers']} layer rows, breakdown run {short_id(v['breakdown_run'])}): fusing them "
        f"(torch.compile) could remove up to that share, at most {times(v['max_speedup'])}."
    )


def _data_wait(v: dict) -> str:
    return (
        f"the step waits for data {pct(v['share'])} of the time (breakdown run "
        f"{short_id(v['breakdown_run'])}, {v['workers'] or '?'} loader workers): more workers could "
        f"remove up to that share, at most {times(v['max_speedup'])}."
    )


def _by(v: dict) -> str:
    """`, shares by the main thread's CPU clock` where the breakdown said its clock."""
    return f", shares by {v['clock']}" if v.get("clock") else ""


def _parts(v: dict) -> str:
    parts = ", ".join(f"{k.replace('_', ' ')} {pct(f)}" for k, f in v["parts"].items())
    return f"its {ms(v['step_s'])} step (breakdown run {short_id(v['breakdown_run'])}{_by(v)}): {parts}."


def _top_layers(v: dict) -> str:
    rows = "; ".join(
        f"{row_label(r['module'], r['phase'])} {pct(r['share'])}"
        + (f", {r['bound']}" if r.get("bound") and r["bound"] not in ("n/a", "unknown") else "")
        for r in v["layers"]
    )
    return f"largest rows (breakdown run {short_id(v['breakdown_run'])}{_by(v)}): {rows}."


def _breakdown_above_roof(v: dict) -> str:
    return f"breakdown run {short_id(v['breakdown_run'])}: {v['sentence']}"


def _batch_drop(v: dict) -> str:
    return (
        f"throughput falls as batch grows: {num(v['throughput_small'])} samples/s at batch "
        f"{int(v['batch_small'])}, {num(v['throughput_large'])} at batch {int(v['batch_large'])} "
        f"({pct(-v['drop'])})."
    )


def _peer_gap(v: dict) -> str:
    return (
        f"far below its peers: {pct(v['fraction_of_roof'])} of its roof where {v['peer_env']} "
        f"({v['peer_device']}) reaches {pct(v['peer_fraction'])} on the same config."
    )


def _variability(v: dict) -> str:
    return (
        f"step time varies: CV {pct(v['cv'])} over {int(v['steps'])} steps "
        f"(SD {ms(v['std_s'])} around a mean of {ms(v['mean_s'])}, run {short_id(v['run_id'])})."
    )


def _bimodal(v: dict) -> str:
    return (
        f"bimodal steps: {pct(v['slow_share'])} of the steps take {ms(v['slow_mean_s'])} against "
        f"{ms(v['fast_mean_s'])} for the rest (the step-time density dips to "
        f"{pct(v['valley_depth'])} of the smaller peak between them, run {short_id(v['run_id'])})."
    )


def _throttle(v: dict) -> str:
    bits = []
    if v.get("sm_clock_median_hz") is not None and v.get("sm_clock_base_hz") is not None:
        bits.append(
            f"SM clock median {si(v['sm_clock_median_hz'], 'Hz')} against a base of "
            f"{si(v['sm_clock_base_hz'], 'Hz')}"
        )
    if v.get("throttled_share"):
        bits.append(
            f"a thermal/power clock-event reason in {pct(v['throttled_share'])} of the NVML "
            f"samples ({v.get('reasons') or 'reasons not recorded'})"
        )
    if v.get("temperature_max_c") is not None and v.get("temperature_slowdown_c") is not None:
        bits.append(
            f"temperature up to {num(v['temperature_max_c'])} °C (slowdown at "
            f"{num(v['temperature_slowdown_c'])} °C)"
        )
    if v.get("power_max_w") is not None and v.get("power_limit_w") is not None:
        bits.append(f"power up to {num(v['power_max_w'])} W of a {num(v['power_limit_w'])} W limit")
    return f"clock throttling during the measured steps (run {short_id(v['run_id'])}): {'; '.join(bits)}."


def _memory(v: dict) -> str:
    return (
        f"device memory near capacity: {si(v['peak_bytes'], 'B')} allocated at peak of "
        f"{si(v['total_bytes'], 'B')} ({pct(v['share'])}, run {short_id(v['run_id'])})."
    )


def _flops_incomplete(v: dict) -> str:
    return (
        f"counted FLOPs incomplete: {v['ops']} ran with no FLOP formula and carry "
        f"{pct(v['share'])} {v['of']} (run {short_id(v['run_id'])}); "
        "train_flops_per_step leaves their FLOPs out, so its FLOP/s, intensity and fraction of roof "
        "are low by an unknown amount (the run's flops/counts_by_op.csv lists every op)."
    )


def _profile(v: dict) -> str:
    return (
        f"profile and train runs disagree: the profile counted {si(v['profile_flops_per_step'], 'FLOP')} "
        f"per step, {times(v['ratio'])} the {si(v['train_flops_per_step'], 'FLOP')} the train runs "
        f"counted (profile run {short_id(v['profile_run'])}): its intensity rests on other work "
        "(backward kernels missed, another config?)."
    )


def _ceiling_low(v: dict) -> str:
    unit = v["unit"]
    what = "DRAM bandwidth" if unit == "B/s" else f"{v['ceiling'].split(':')[1]} compute"
    if v.get("peaks_run"):
        load = (
            f", 1-minute load average {num(v['load_average_1m_start'])} at its start and up to "
            f"{num(v['load_average_1m_max'])} on {int(v['cpu_count'])} CPUs ({v['trust']})"
            if v.get("trust") in ("quiet", "busy")
            else ", its load not recorded"
        )
        when = f" on {_date(v['start_time'])}" if v.get("start_time") is not None else ""
        origin = f"measured by peaks run {v['peaks_run']}{when}{load}"
    else:
        origin = f"from {v['ceiling_source'] or 'the vendor table'}"
    vendor = (
        f"; the vendor figure is {si(v['vendor_value'], unit)}"
        if v.get("vendor_value") is not None
        else "; no vendor figure for this device"
    )
    return (
        f"its {what} ceiling is too low: it achieved {si(v['achieved'], unit)} where the ceiling "
        f"says {si(v['ceiling_value'], unit)} ({origin}){vendor}. No fraction of roof is stated: "
        "rerun `python -m profiling.peaks` on a quiet machine, or give the device's figure with "
        "--peaks-file (fp32 on TF32 tensor cores, or cache reuse the modeled intensity ignores, "
        "also lift a point over a true ceiling)."
    )


def _date(ms_since_epoch) -> str:
    t = dt.datetime.fromtimestamp(float(ms_since_epoch) / 1e3, dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def _unstable(v: dict) -> str:
    runs = ", ".join(
        f"{short_id(r['run_id'])}{' (' + r['run_name'] + ')' if r['run_name'] else ''} "
        f"{num(r['samples_per_s'])} samples/s"
        for r in v["runs"]
    )
    return (
        f"unstable: {v['why']}; runs {runs}. Its numbers say more about the machine than the "
        "configuration: rerun it on a quiet machine with more iterations (--iters auto measures "
        "until the mean is known to ±2%); its bound and fraction of roof are shown marked "
        "unreliable, and no move or anomaly is drawn from it."
    )


def _cost(v: dict) -> str:
    ci = f" (±{pct(v['ci95_rel'])})" if v.get("ci95_rel") is not None else ""
    devices = f" × {int(v['devices'])} devices" if v.get("devices", 1) > 1 else ""
    return (
        f"USD {num(v['usd_per_million_samples'])} per 1 M training samples{ci}, USD "
        f"{num(v['usd_per_imagenet_epoch'])} per ImageNet-1k epoch, at USD "
        f"{num(v['usd_per_hour'])}/h{devices} ({v['price_source']})."
    )


def _energy(v: dict) -> str:
    return f"{num(v['energy_j_per_sample'])} J per training sample ({v['energy_source']})."


SENTENCES: dict[str, Callable[[dict], str]] = {
    "bound": _bound,
    "roof_far": _roof_far,
    "speedup": _speedup,
    "peak_ratio": _peak_ratio,
    "fusion": _fusion,
    "data_wait": _data_wait,
    "parts": _parts,
    "top_layers": _top_layers,
    "batch_drop": _batch_drop,
    "peer_gap": _peer_gap,
    "variability": _variability,
    "bimodal": _bimodal,
    "throttle": _throttle,
    "memory_near_capacity": _memory,
    "flops_incomplete": _flops_incomplete,
    "profile_disagrees": _profile,
    "ceiling_low": _ceiling_low,
    "unstable": _unstable,
    "breakdown_above_roof": _breakdown_above_roof,
    "cost": _cost,
    "energy": _energy,
}
