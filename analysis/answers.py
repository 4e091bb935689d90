"""The report's first screen: the answers a user comes with, in this order, before any table.

1. When configurations are unstable, one line: how many, why (the widest interval, the widest
   spread of runs), the machine's load where a run recorded it, and what to do; the answers still
   follow, their numbers marked `unreliable` rather than withheld.
2. Per environment, the fastest configuration: its samples/s with its runs' range and the 95 %
   CI, its bound and fraction of roof, what would move it, and where its step's time goes (the
   largest rows of its breakdown in the breakdown's own ranking and clock, or the command that
   makes one).
3. What is missing: how many lines, the first of them.

Short: the artifact viewer shows the report about 510 px wide and 670 px high at 1280 x 900 on a
first visit (tests/test_ui_browser.py holds it to that).

Everything here is read from the findings records (analysis/findings: the configuration's one
statistic, findings.json's numbers, its breakdown's findings): the first screen never computes a
number of its own, so it cannot disagree with the tables below it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from analysis.findings.report import UNRELIABLE, bound_text, fraction_text, samples_cell
from common import fmt
from profiling.breakdown.names import SHORT_CLOCKS, row_label

MISSING_CHARS = 140
"""the first line of "What is missing" as the first screen repeats it (the section below has them
all, whole)"""
MOVE_TOPICS = ("move",)


def fastest(configs: Sequence[dict]) -> dict[tuple[str, str], dict]:
    """(env_label, device_name) -> its configuration with the most samples/s (unstable ones
    included: they are marked, not left out)."""
    out: dict[tuple[str, str], dict] = {}
    for c in configs:
        where = (c["env_label"], c["device_name"])
        best = out.get(where)
        if c.get("throughput_samples_per_s") is not None and (
            best is None or c["throughput_samples_per_s"] > best["throughput_samples_per_s"]
        ):
            out[where] = c
    return out


def instability_line(configs: Sequence[dict], loads: Mapping[str, str]) -> str:
    """One line for every unstable configuration together ('' when none is): how many, why, the
    load where recorded, what to do."""
    bad = [c for c in configs if c.get("unstable")]
    if not bad:
        return ""
    why = []
    cis = [c["step_time_ci95_rel"] for c in bad if c.get("step_time_ci95_rel") is not None]
    if cis:
        why.append(f"mean step times to {fmt.ci95(max(cis))} at worst (over ±50%)")
    spreads = [
        c["throughput_spread_ratio"] for c in bad if (c.get("throughput_spread_ratio") or 1) > 1.5
    ]
    if spreads:
        why.append(f"runs up to ×{fmt.num(max(spreads))} apart in samples/s")
    envs = sorted({c["env_label"] for c in bad})
    load = "; ".join(f"{e}: {loads[e]}" for e in envs if loads.get(e))
    load = f"; machine load {load}" if load else "; no run recorded the machine's load"
    verb = "is" if len(bad) == 1 else "are"
    return (
        f"**{UNRELIABLE.capitalize()}: {len(bad)} of {len(configs)} configurations {verb} "
        f"unstable** ({' and '.join(why) or 'their runs disagree'}{load}): rerun on a quiet "
        f"machine with `--iters auto`. Their numbers below are marked {UNRELIABLE}."
    )


def samples_text(c: dict) -> str:
    """`2.81 samples/s (1 run, 95% CI ±79.4%)`: the findings table's cell (samples_cell) without
    its mark (the first screen says it once, after the roof)."""
    return samples_cell({**c, "unstable": None}).replace(" (", " samples/s (", 1)


def roof_text(c: dict) -> str:
    """`memory-bound at 3.0% of its roof`, `; unreliable: unstable` when unstable; above its roof
    or without a ceiling, said so."""
    bound = bound_text({**c, "unstable": None})
    if (c.get("ceiling") or {}).get("too_low"):
        text = f"{bound}, above its roof: its ceiling is too low"
    else:
        frac = fraction_text({**c, "unstable": None})
        text = f"{bound} at {frac} of its roof" if frac else f"{bound}, no ceiling"
    return text + (f"; {UNRELIABLE}: unstable" if c.get("unstable") else "")


def move_text(c: dict) -> str:
    """What would move it: its first measured move, else what its roof findings say, else that
    nothing measured says (an unstable configuration: measure it again first)."""
    if c.get("unstable"):
        return "measure it again first (no move is drawn from unstable runs)"
    for f in _findings(c):
        if f["topic"] in MOVE_TOPICS:
            return f["sentence"]
    for f in _findings(c):
        if f["kind"] in ("roof_far", "ceiling_low"):
            return f["sentence"]
    return "nothing measured says: a breakdown of it would"


def breakdown_command(c: dict) -> str:
    """The command that makes a breakdown of configuration `c` (a breakdown refuses --compile)."""
    parts = [
        "python -m profiling --breakdown",
        f"--model {c['model']}",
        f"--batch {c['batch_size']}",
        f"--precision {c['precision']}",
        f"--image-size {c['image_size']}",
        "--channels-last" if c.get("channels_last") else "",
        f"--optimizer {c['optimizer']}" if c.get("optimizer") not in (None, "sgd") else "",
        f"--device {c['device_type']}" if c.get("device_type") else "",
        f"--env-label {c['env_label']}",
    ]
    return " ".join(p for p in parts if p)


def _findings(c: dict) -> list[dict]:
    """The configuration's findings as findings.json holds them (a record in memory holds
    records.Finding objects)."""
    return [
        f
        if isinstance(f, dict)
        else {"kind": f.kind, "topic": f.topic, "values": f.values, "sentence": f.sentence()}
        for f in c.get("findings") or []
    ]


def _finding(c: dict, kind: str) -> dict | None:
    return next((f for f in _findings(c) if f["kind"] == kind), None)


def step_text(c: dict) -> str:
    """Where its step's time goes: its breakdown's largest rows in the breakdown's own ranking
    and clock (its `top_layers` finding), its rows above their roof, or the command that makes a
    breakdown."""
    top = _finding(c, "top_layers")
    if top is None:
        return f"no breakdown yet: `{breakdown_command(c)}`."
    v = top["values"]
    rows = ", ".join(
        f"{row_label(r['module'], r['phase'])} {fmt.pct(r['share'])}" for r in v["layers"]
    )
    clock = f", {SHORT_CLOCKS.get(v['clock'], v['clock'])}" if v.get("clock") else ""
    above = (
        "; rows above their roof: see its findings" if _finding(c, "breakdown_above_roof") else ""
    )
    return f"{rows} (breakdown {fmt.short_id(v['breakdown_run'])}{clock}{above})."


def _end(text: str) -> str:
    return text if text.endswith(".") else text + "."


def env_item(c: dict, run_names: Mapping[str, str]) -> str:
    """One environment's answer, in one list item, short enough that two fit MLflow's artifact
    viewer (about 510 px wide on a first visit) on one screen."""
    names = [run_names[r] for r in c.get("run_ids") or [] if run_names.get(r)]
    named = f" (`{names[0]}`{' and others' if len(names) > 1 else ''})" if names else ""
    return (
        f"**{c['env_label']}**: **{c['label']}**{named}, {samples_text(c)}, {roof_text(c)}. "
        f"**Would move it**: {_end(move_text(c))} **Its step**: {step_text(c)}"
    )


def blocks(
    configs: Sequence[dict],
    missing: Sequence[str],
    run_names: Mapping[str, str],
    loads: Mapping[str, str],
) -> list[tuple] | None:
    """The first screen's blocks (analysis/report.py Block), None without a configuration."""
    if not configs:
        return None
    out: list[tuple] = []
    line = instability_line(configs, loads)
    if line:
        out.append(("p", line))
    best = fastest(configs)
    items = [env_item(c, run_names) for _, c in sorted(best.items())]
    out += [("p", "**Fastest configuration per environment**"), ("list", items)]
    if missing:
        first = missing[0] if len(missing[0]) <= MISSING_CHARS else missing[0][:MISSING_CHARS] + "…"
        out.append(("p", f"**What is missing**: {len(missing)} lines (below), first: {first}"))
    return out


def answer_paragraph(configs: Sequence[dict], run_names: Mapping[str, str]) -> str:
    """The fastest configuration of each environment as the report's first screen says it, in
    one paragraph (the experiment's description, the analysis run's tag `analysis_fastest`)."""
    best = fastest(configs)
    lines = []  # the fastest environment first: the description shows its first line
    for c in sorted(best.values(), key=lambda c: -c["throughput_samples_per_s"]):
        env = c["env_label"]
        names = [run_names[r] for r in c.get("run_ids") or [] if run_names.get(r)]
        lines.append(
            f"fastest on {env}: {names[0] if names else c['label']}, {samples_text(c)}, "
            f"{roof_text(c)}"
        )
    return "; ".join(lines) + "."


def run_names(train) -> dict[str, str]:
    """run id -> its name, for the train runs read (a frame of analysis.Analysis.train)."""
    if train.empty or "run_name" not in train:
        return {}
    return dict(zip(train["run_id"], train["run_name"].astype(str)))


def loads(train) -> dict[str, str]:
    """env label -> the highest 1-minute load average its train runs recorded while they
    measured, with its CPUs (`1-minute load average up to 12.7 on 2 CPUs`); environments whose
    runs recorded none are left out."""
    if train.empty or "load_average_1m_max" not in train:
        return {}
    out = {}
    for env, g in train.groupby("env_label"):
        top = g["load_average_1m_max"].dropna()
        if not top.empty:
            cpus = g["cpu_count"].dropna() if "cpu_count" in g else top.iloc[:0]
            on = f" on {int(cpus.max())} CPUs" if not cpus.empty else ""
            out[str(env)] = f"1-minute load average up to {top.max():.1f}{on}"
    return out


def unstable_keys(configs: Sequence[dict]) -> frozenset:
    """(env_label, device_name, config_key) of the unstable configurations: what the tables mark
    unreliable."""
    return frozenset(
        (c["env_label"], c["device_name"], str(c["config_key"]))
        for c in configs
        if c.get("unstable")
    )
