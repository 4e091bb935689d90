"""The Findings section of report.md / report.html (blocks as analysis/report.py defines them) and
the headline lines of the analysis run's description. Pure."""

from __future__ import annotations

from analysis.findings.engine import Findings
from analysis.findings.records import Finding
from analysis.markdown import Table
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
        "samples/s (runs' range)",
        "bound",
        "fraction of roof",
        "headroom",
        "ceiling",
        "USD / 1M samples",
        "USD / ImageNet epoch",
        "J / sample",
    ]
    rows = []
    for c in findings.configs:
        ci = c.get("usd_per_million_samples_ci95")
        usd = num(c.get("usd_per_million_samples"))
        if usd and ci:
            usd += f" ({num(ci[0])}–{num(ci[1])})"
        rows.append(
            [
                c["env_label"],
                c["device_name"],
                c["label"],
                _samples(c),
                c["bound"],
                pct(c.get("fraction_of_roof")),
                f"×{num(c['headroom_factor'])}" if c.get("headroom_factor") else "",
                f"{c['ceiling']['kind']} {c['ceiling']['dtype'] or ''}".strip(),
                usd or "no price",
                num(c.get("usd_per_imagenet_epoch")) or "no price",
                num(c.get("energy_j_per_sample")) or "not measured",
            ]
        )
    return Table(headers, rows)


def _samples(c: dict) -> str:
    """The configuration's samples/s (from its pooled mean step time) and, where its runs
    disagree, the lowest and highest run's."""
    text = num(c.get("throughput_samples_per_s"))
    lo, hi = c.get("throughput_min_run_samples_per_s"), c.get("throughput_max_run_samples_per_s")
    return f"{text} ({num(lo)}–{num(hi)})" if text and lo and hi and hi > lo else text


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
