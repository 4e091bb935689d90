"""The Findings section of report.md / report.html (blocks as analysis/report.py defines them) and
the headline lines of the analysis run's description. Pure."""

from __future__ import annotations

from analysis.findings.engine import Findings
from analysis.findings.records import Finding
from analysis.markdown import Table, samples_phrase
from common.fmt import num, pct

MAX_LISTED = 300
"""findings listed in the report (every one is in findings.json)."""
INTRO = (
    "What bounds each configuration, how close it comes to its roof, what would move it and what "
    "it costs. Every sentence names the measured number it rests on (the record, with the run "
    "ids, is in `findings.json` next to this report); the rules and thresholds are in "
    'docs/analysis.md, "Findings".'
)


def headline_text(c: dict, f: Finding) -> str:
    return f"{c['env_label']} ({c['device_name']}), {c['label']}: {f.sentence()}"


def configs_table(findings: Findings) -> Table:
    headers = [
        "env",
        "device",
        "config",
        "samples/s (runs, their range, 95% CI)",
        "bound",
        "fraction of roof",
        "headroom",
        "ceiling",
        "USD / 1M samples",
        "USD / ImageNet epoch",
        "J / sample",
    ]
    rows = []
    for c in by_samples(findings.configs):
        ci = c.get("usd_per_million_samples_ci95")
        usd = num(c.get("usd_per_million_samples"))
        if usd and ci:
            usd += f" ({num(ci[0])}–{num(ci[1])})"
        rows.append(
            [
                c["env_label"],
                c["device_name"],
                c["label"],
                samples_cell(c),
                bound_text(c),
                fraction_text(c),
                f"×{num(c['headroom_factor'])}" if c.get("headroom_factor") else "",
                f"{c['ceiling']['kind']} {c['ceiling']['dtype'] or ''}".strip(),
                usd or "no price",
                num(c.get("usd_per_imagenet_epoch")) or "no price",
                num(c.get("energy_j_per_sample")) or "not measured",
            ]
        )
    return Table(headers, rows)


BOUND_WORDS = {
    "compute": "compute-bound",
    "memory": "memory-bound",
    "latency": "latency/launch-bound",
    "data": "data-bound",
    "host": "host-bound",
}
"""a record's bound as every page says it (a train run's tag `bound` is `memory-bound`)"""
UNRELIABLE = "unreliable"
"""what follows a number of an unstable configuration wherever it is shown"""


def bound_text(c: dict) -> str:
    """`memory-bound`, `memory-bound (unreliable: unstable)` for an unstable configuration."""
    b = BOUND_WORDS.get(str(c.get("bound")), str(c.get("bound") or "unknown"))
    return f"{b} ({UNRELIABLE}: unstable)" if c.get("unstable") else b


def fraction_text(c: dict) -> str:
    """`3.0%`, `3.0% (unreliable)` for an unstable configuration; '' without one."""
    frac = pct(c.get("fraction_of_roof"))
    return f"{frac} ({UNRELIABLE})" if frac and c.get("unstable") else frac


def samples_cell(c: dict) -> str:
    """The configuration's samples/s (from its pooled mean step time) with its runs' range where
    they disagree and its 95% CI, as every table writes it (analysis.markdown.samples_phrase);
    marked unreliable when unstable."""
    return samples_phrase(
        c.get("throughput_samples_per_s"),
        len(c.get("run_ids") or []),
        c.get("throughput_min_run_samples_per_s"),
        c.get("throughput_max_run_samples_per_s"),
        c.get("step_time_ci95_rel"),
        bool(c.get("unstable")),
    )


def by_samples(configs) -> list[dict]:
    """The configurations fastest first within each environment and device."""
    return sorted(
        configs,
        key=lambda c: (c["env_label"], c["device_name"], -(c.get("throughput_samples_per_s") or 0)),
    )


def section(findings: Findings) -> list[tuple]:
    """The Findings section's body: headlines, one row per configuration, then every finding."""
    out: list[tuple] = [("p", INTRO)]
    if not findings.configs:
        return out + [("p", "No configuration to judge: no FINISHED train run.")]
    out += [
        ("p", "**Headlines**"),
        ("list", [headline_text(c, f) for c, f in findings.headlines(5)]),
    ]
    out += [("table", configs_table(findings))]
    items = [
        f"**{c['env_label']}, {c['label']}**: {f.sentence()}"
        for c in findings.configs
        for f in c["findings"]
    ]
    out += [
        (
            "p",
            "**Every finding**, per configuration (bound, anomalies, what would move it, "
            "breakdown, cost):",
        ),
        ("list", items[:MAX_LISTED]),
    ]
    if len(items) > MAX_LISTED:
        out += [("p", f"{len(items) - MAX_LISTED} more findings in `findings.json`.")]
    energy_notes = sorted(
        {
            c["energy_note"]
            for c in findings.configs
            if c.get("energy_j_per_sample") is None and c.get("energy_note")
        }
    )
    if energy_notes:
        out += [
            ("p", "Energy per sample where no run measured it: " + "; ".join(energy_notes) + ".")
        ]
    return out


def description_lines(findings: Findings, n: int = 3) -> list[str]:
    """The analysis run's headline findings, one line each, with their numbers."""
    return [f"- {headline_text(c, f)}" for c, f in findings.headlines(n)]
