"""The per-chip tables: the committed counter table (ncu_chips.json) generated from NVIDIA's metric
database, and the two Markdown tables of docs/profiling.md ("Chips") made from it.

Pure: returns text; `python -m profiling.ncu.chips --write` (profiling.ncu.chips.__main__) writes
the file.
"""

from __future__ import annotations

import json
import re

from profiling.ncu import nvperf
from profiling.ncu.chips.counters import counters_for, database_facts
from profiling.ncu.chips.devices import CC_CHIPS, cc_text, known_chips
from profiling.ncu.names import TENSOR_PREFIX
from profiling.ncu.plan import plan_metrics


def build_table(db: "nvperf.MetricDatabase") -> dict:
    """The committed table's content, generated from the live database."""
    chips = {}
    for name in db.chips:
        with db.chip(name) as chip:
            present, tensor = database_facts(chip)
        chips[name] = {"counters": present, "tensor": tensor}
    return {
        "generated_by": "python -m profiling.ncu.chips --write",
        "ncu_report": nvperf.ncu_report_version(),
        "library": nvperf.LIBRARY_NAME,
        "chips": chips,
    }


def table_text(table: dict) -> str:
    """The table as committed: JSON, one counter per line, raw-dependency lists on one line."""
    text = json.dumps(table, indent=1, sort_keys=True)
    return (
        re.sub(r"\[\s*([\d,\s]*?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m[1]) + "]", text)
        + "\n"
    )


def markdown() -> str:
    """Per chip (chips with the same counters share a row): example GPUs, compute capability, DRAM
    counters, tensor counters summed, what is missing. The table in docs/profiling.md."""
    rows: dict[tuple, list[str]] = {}
    for chip in known_chips():
        c = counters_for(chip)
        cc = ", ".join(cc_text(k) for k, v in CC_CHIPS.items() if chip in v) or "?"
        dram = " + ".join(f"`{n}`" for n in c.dram) or "**none**"
        tensor = ", ".join(_short(n) for n in c.tensor_sum()) or "none"
        missing = ", ".join(plan_metrics("roofline", "auto", (), c).missing) or "—"
        rows.setdefault((cc, dram, tensor, missing), []).append(chip)
    lines = [
        "| chips | example GPUs | CC | DRAM counters | tensor counters summed (`sm__ops_path_tensor_…`) | missing |",
        "|---|---|---|---|---|---|",
    ]
    for (cc, dram, tensor, missing), names in rows.items():
        examples = "; ".join(EXAMPLES[n] for n in names if EXAMPLES.get(n))
        lines.append(f"| {', '.join(names)} | {examples} | {cc} | {dram} | {tensor} | {missing} |")
    return "\n".join(lines)


def aggregates_markdown() -> str:
    """Per chip group: each summed tensor counter and the counters directly inside it (by raw
    dependencies or by name), i.e. what adding them as well would count twice."""
    groups: dict[tuple, list[str]] = {}
    for chip in known_chips():
        c = counters_for(chip)
        lines = []
        for top in c.tensor_sum():
            parts = c.tensor_parts(top)
            direct = [
                p
                for p in parts
                if not any(q != p and c.covers(q, p) and not c.covers(p, q) for q in parts)
            ]
            if direct:
                lines.append(f"`{_short(top)}` = {' + '.join(f'`{_short(p)}`' for p in direct)}")
        groups.setdefault(tuple(lines), []).append(chip)
    out = ["| chips | summed counter = the counters it covers (not added again) |", "|---|---|"]
    for lines, names in groups.items():
        out.append(f"| {', '.join(names)} | {'; '.join(lines) or '—'} |")
    return "\n".join(out)


def _short(name: str) -> str:
    return name[len(TENSOR_PREFIX) : -len(".sum")]


EXAMPLES = {
    "TU102": "RTX 2080 Ti, Titan RTX",
    "TU104": "Tesla T4, RTX 2080",
    "TU106": "RTX 2070, RTX 2060",
    "TU116": "GTX 1660",
    "TU117": "GTX 1650, T1000",
    "GA100": "A100, A30",
    "GA102": "RTX 3090, A10, A40",
    "GA103": "RTX 3080 Ti laptop",
    "GA104": "RTX 3070, A4000",
    "GA106": "RTX 3060",
    "GA107": "RTX 3050 laptop, A2, A16",
    "GA10B": "Jetson Orin",
    "GH100": "H100, H200, GH200",
    "AD102": "RTX 4090, L40S",
    "AD103": "RTX 4080",
    "AD104": "L4, RTX 4070",
    "AD106": "RTX 4060 Ti",
    "AD107": "RTX 4060",
    "GB100": "B200, GB200",
    "GB102": "",
    "GB110": "B300, GB300 (inferred)",
    "GB112": "",
    "GB10B": "Jetson Thor (inferred)",
    "GB202": "RTX 5090, RTX PRO 6000",
    "GB203": "RTX 5080, RTX 5070 Ti",
    "GB205": "RTX 5070",
    "GB206": "RTX 5060",
    "GB207": "RTX 5050",
    "GB20B": "DGX Spark GB10 (inferred)",
    "GB20C": "",
    "GR100": "",
}
