"""The report (report.md, report.html) and the table files (CSV with raw SI values, Markdown for
reading).

The report is one ordered list of sections, `SECTIONS`: each a heading and a pure function that
writes its body from a `Report` (everything the report says, gathered once and frozen);
`report_blocks` lays them out as blocks, `markdown_text` renders the blocks as report.md,
analysis/html.py as report.html. The tables come from analysis/markdown.py. `write` and
`write_tables` are the edges that write the files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis import answers, breakdown, hierarchy, history_report, html, whatif
from analysis.breakdown import Breakdowns
from analysis.core import Analysis
from analysis.findings import Findings
from analysis.history import History
from analysis.findings import report as findings_report
from analysis.scaling import scaling_csv
from common.fmt import csv_frame
from analysis.markdown import (
    complexity_table,
    environments_table,
    failed_table,
    md_table,
    md_text,
    roofs_table,
    scaling_table,
    speedups_table,
    summary_frame,
    summary_table,
)

COMPLEXITY_INTRO = (
    "From the latest `complexity` run per environment (`python -m train.complexity`, docs/complexity.md): "
    "forward FLOPs count 2 per multiply-add plus elementwise work, MACs are multiply-adds, training FLOPs "
    "are forward + backward + optimizer; activations are the bytes saved for backward per sample; the "
    "largest batch is predicted from weights, gradients, optimizer state and activations, not measured."
)

SCALING_INTRO = (
    "Data-parallel runs (`torchrun ... -m train --distributed ddp|deepspeed`): global samples/s "
    "against world size, with the ideal (world size × the baseline's samples/s, dashed); scaling "
    "efficiency (filled) and the share of the step spent in communication that compute does not "
    "hide (hollow, dotted), both out of 1. Raw values: `scaling.csv`, next to this report."
)

ROOFLINES_INTRO = (
    "Filled circles: intensity measured with Nsight Compute; hollow triangles: modeled "
    "intensity. Solid ceilings: measured peaks; dashed: vendor / peaks file."
)

SUMMARY_INTRO = (
    "Raw SI values, run ids and every roofline quantity: `summary.csv`, next to this "
    "report (the analysis run's artifact `report/summary.csv`)."
)

METHOD = [
    (
        "**Achieved FLOP/s** comes from the train runs only (unperturbed timing): training FLOPs "
        "per step (forward + backward + optimizer, counted at dispatch level) / mean step time. "
        "Repeated runs of one environment and config pool their steps: the configuration's mean "
        "step time is the mean over all measured steps of its runs (docs/schema.md, "
        '"Definitions"); its samples/s = batch × world size / that mean, its achieved FLOP/s = '
        "FLOPs per step / that mean, and its bound and fraction of roof are evaluated there."
    ),
    (
        "**Intensity** is measured when a profile run of the same `config_key` exists on the same "
        "device name (Nsight Compute: FLOPs / DRAM bytes, L2 and L1 bytes where counted); otherwise "
        "it is the train run's modeled intensity (bytes of every op's inputs and outputs, no "
        "reuse) and the point is drawn as a hollow triangle instead of a filled circle. The "
        "`intensity source` column says which."
    ),
    (
        "**Ceilings**: a measured peaks run of the same environment and device (else of another "
        "environment with the same device name) gives the roof; ceilings it lacks come from the "
        "vendor table (roofline.vendor, with the entries of --peaks-file). Measured ceilings "
        "are drawn solid, vendor ones dashed. No ceiling: no bound and no fraction of roof (never a "
        "guessed number)."
    ),
    (
        "**Ceiling per precision**: fp32 runs -> the fp32 ceiling; fp16/bf16 autocast runs -> the "
        "fp16/bf16 (tensor-core) ceiling when known, else fp32. On Ampere and newer GPUs cuDNN "
        "convolutions in fp32 may use TF32 (torch.backends.cudnn.allow_tf32 is on by default), so "
        "fp32 runs can exceed the fp32 ceiling; the tf32 ceiling is drawn where measured for "
        "comparison."
    ),
    (
        "**Roofline**: attainable = min(intensity × DRAM bandwidth, peak); ridge = peak / "
        "bandwidth; a point left of the ridge is memory-bound, at or right of it compute-bound; "
        "fraction of roof = achieved / attainable (the one efficiency). With L2/L1 intensities and ceilings (hierarchical "
        "roofline) the lowest bound over the levels names the limiting level."
    ),
    (
        "**Scaling** (data-parallel runs, docs/distributed.md): samples/s are global (batch per "
        "process × world size / mean step time, each step as long as its slowest rank); the ideal "
        "is world size × the baseline's samples/s, the baseline being the same engine at world "
        "size 1 when measured, else the single-process run of the same config; scaling efficiency "
        "= samples/s / ideal (weak scaling: the batch per process is fixed). Exposed communication "
        "= mean step time − mean compute-only step time (the same steps without gradient "
        "synchronisation, where the engine has such a step); its share is that over the mean "
        "step time. Achieved FLOP/s on the roofline stay per process."
    ),
    (
        "**Samples/s and its spread**: the samples/s from the pooled mean step time, then the "
        "spread of the runs: several runs of one config in one environment -> the lowest and "
        "highest run's own rate (`summary.csv` adds their ratio and the SD of the runs' rates, "
        "ddof = 1); one run -> ± the SD over its measured steps (within run). The fp16/bf16 "
        "speed-ups' 95 % intervals are taken on the log scale from both points' step-time CIs "
        "(never below 0), as the findings' are."
    ),
]


Block = tuple
"""One piece of the report: ("h1", text), ("h2", text), ("p", text), ("list", [text, ...]),
("table", Table) or ("figure", title, path relative to the report). Text may use two inline
marks, `code` and **bold**; everything else in it is plain text (user text included)."""


@dataclass(frozen=True)
class Report:
    """Everything the report says, gathered once (analysis/app.py) and read by every section:
    the analysis, what was built beside it (findings, breakdown runs, hierarchical rooflines) and
    the figures drawn. Frozen: a section reads it and never changes it."""

    analysis: Analysis
    figures: Mapping[str, Sequence[tuple[str, str]]]
    """(title, path relative to the report) of each figure drawn, by section key
    (analysis/figures.py SECTION_ORDER, "breakdown", "hierarchical")."""
    source: str
    """the tracking store read, as shown"""
    query: str
    """what was read of it (fetch.Query.describe)"""
    generated: str
    """when, as shown"""
    variability_caption: str = ""
    findings: Findings | None = None
    """the findings (analysis/findings); None: no Findings section"""
    breakdown: Breakdowns | None = None
    """the breakdown runs (analysis/breakdown.py); None: no breakdown section"""
    hierarchies: tuple[dict, ...] = ()
    """the profile runs' hierarchical rooflines (analysis/hierarchy.py collect)"""
    whatifs: tuple[dict, ...] = ()
    """the what-if runs' checks as logged (analysis/fetch/whatifs.py, screened)"""
    history: History | None = None
    """every series' change points (analysis/history.py); None: no "What changed over time" """
    notes: tuple[str, ...] = ()
    """what the steps after the join add to "What is missing", in order"""

    @property
    def missing(self) -> tuple[str, ...]:
        """ "What is missing": the analysis' notes, then the later steps'."""
        return (*self.analysis.notes, *self.notes)

    def figs(self, key: str) -> list[Block]:
        return [("figure", t, p) for t, p in self.figures.get(key, [])]


@dataclass(frozen=True)
class Section:
    """One section of the report: its heading and the function that writes its body from the
    Report (a list of blocks; None leaves the section out, heading and all)."""

    title: str
    body: Callable[[Report], list[Block] | None]


def _read(r: Report) -> list[Block]:
    """What the report was made from: the store, the runs of each kind, the points."""
    c = r.analysis.counts
    return [
        ("p", f"Generated {r.generated} from `{r.source}`; runs: {r.query}."),
        (
            "p",
            f"Runs used: {c.get('train', 0)} finished train, {c.get('profile', 0)} profile, "
            f"{c.get('peaks', 0)} peaks; {c.get('failed', 0)} failed (listed below). "
            f"Points (environment × config): {c.get('points', 0)}, {c.get('measured_points', 0)} "
            f"with measured intensity, {c.get('modeled_points', 0)} with modeled intensity.",
        ),
    ]


def _findings(r: Report) -> list[Block] | None:
    return None if r.findings is None else findings_report.section(r.findings)


def _advice(r: Report) -> list[Block]:
    return whatif.section(list(r.whatifs), next(iter(r.figures.get("whatif", [])), None))


def _answers(r: Report) -> list[Block] | None:
    """The first screen (analysis/answers.py): read from the findings and the train runs."""
    if r.findings is None:
        return None
    train = r.analysis.train
    return answers.blocks(
        r.findings.configs, r.missing, answers.run_names(train), answers.loads(train)
    )


def unstable(r: Report) -> frozenset:
    """What the tables mark unreliable (answers.unstable_keys of the findings)."""
    return answers.unstable_keys(r.findings.configs) if r.findings is not None else frozenset()


def _implausible(r: Report) -> list[Block]:
    if r.analysis.flags:
        return [("list", list(r.analysis.flags))]
    return [("p", "None: no point above its roof, no scaling over 100%, no CI over ±50%.")]


def _missing(r: Report) -> list[Block]:
    if r.missing:
        return [("list", list(r.missing))]
    return [("p", "Nothing: every point has an intensity and a roof.")]


def _rooflines(r: Report) -> list[Block]:
    return [("p", ROOFLINES_INTRO), *r.figs("roofline")]


def _summary(r: Report) -> list[Block]:
    return [("p", SUMMARY_INTRO), ("table", summary_table(r.analysis.points, unstable(r)))]


def _variability(r: Report) -> list[Block]:
    caption = [("p", r.variability_caption)] if r.variability_caption else []
    return caption + (r.figs("variability") or [("p", "No step_time_s series to plot.")])


def _speedups(r: Report) -> list[Block]:
    if r.analysis.speedups.empty:
        return [
            (
                "p",
                "No configuration has both an fp32 and an fp16/bf16 run in the same environment.",
            )
        ]
    return r.figs("speedup") + [("table", speedups_table(r.analysis.speedups))]


def _scaling(r: Report) -> list[Block] | None:
    if r.analysis.scaling.empty:
        return None
    return [("p", SCALING_INTRO), *r.figs("scaling"), ("table", scaling_table(r.analysis.scaling))]


def _breakdown(r: Report) -> list[Block] | None:
    if r.breakdown is None:
        return None
    return breakdown.section(r.breakdown, next(iter(r.figures.get("breakdown", [])), None))


def _complexity(r: Report) -> list[Block]:
    if r.analysis.complexity.empty:
        return [
            (
                "p",
                "No `complexity` run in these experiments (`python -m train.complexity` logs one).",
            )
        ]
    return [("p", COMPLEXITY_INTRO), ("table", complexity_table(r.analysis.complexity))]


def _failed(r: Report) -> list[Block]:
    if r.analysis.failed.empty:
        return [("p", "None.")]
    return [("table", failed_table(r.analysis.failed))]


SECTIONS: tuple[Section, ...] = (
    Section("The answers", _answers),
    Section("What was read", _read),
    Section("Findings", _findings),
    Section("How good is the advice", _advice),
    Section("Implausible values", _implausible),
    Section("What is missing", _missing),
    Section("Environments", lambda r: [("table", environments_table(r.analysis.environments))]),
    Section("Ceilings", lambda r: [("table", roofs_table(r.analysis.roofs))]),
    Section("Rooflines", _rooflines),
    Section("Summary", _summary),
    Section("Throughput vs batch size", lambda r: r.figs("throughput")),
    Section("Step-time variability", _variability),
    Section("Intensity vs batch size", lambda r: r.figs("intensity")),
    Section("fp16/bf16 speed-up over fp32", _speedups),
    Section("Scaling with world size", _scaling),
    Section("Where the step's time goes", _breakdown),
    Section("Model complexity", _complexity),
    Section("Hierarchical roofline (profile runs)", lambda r: hierarchy.section(r.hierarchies)),
    Section(
        "What changed over time",
        lambda r: history_report.body(r.history, r.figs("history")) if r.history else None,
    ),
    Section("Failed runs", _failed),
    Section("Method", lambda r: [("list", METHOD)]),
)
"""The report, in order: one entry per section (docs/analysis.md, "Adding a report section")."""


def report_blocks(r: Report, sections: Sequence[Section] = SECTIONS) -> list[Block]:
    """The report as blocks (report.md and report.html render the same blocks): its title, then
    each section that has a body, in the order of `sections` (the answers first, then what was
    read: the first screen is the answers')."""
    out: list[Block] = [("h1", "Training performance and roofline report")]
    for section in sections:
        body = section.body(r)
        if body is not None:
            out += [("h2", section.title), *body]
    return out


def markdown_text(blocks: list[Block]) -> str:
    """report.md: the blocks as Markdown. Figures are named by path, not embedded: MLflow's
    artifact view shows Markdown image links as text, and report.html has them embedded."""
    out: list[str] = []
    for kind, *rest in blocks:
        if kind == "h1":
            out += [f"# {rest[0]}", ""]
        elif kind == "h2":
            out += [f"## {rest[0]}", ""]
        elif kind == "p":
            out += [md_text(rest[0]), ""]
        elif kind == "list":
            out += [f"- {md_text(item)}" for item in rest[0]] + [""]
        elif kind == "table":
            out += [md_table(rest[0]), ""]
        elif kind == "figure":
            out += [f"Figure: {md_text(rest[0])} (`{rest[1]}`, embedded in report.html)", ""]
        else:
            raise ValueError(f"unknown report block {kind!r}")
    return "\n".join(out)


def write_tables(analysis: Analysis, out_dir: Path, shaky: frozenset = frozenset()) -> list[Path]:
    """summary.csv (raw SI values), summary.md (the report's summary table: `shaky`, the unstable
    configurations, marked unreliable) and the other tables the analysis has."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / "summary.csv"
    csv_frame(summary_frame(analysis.points)).to_csv(csv, index=False)
    md = out_dir / "summary.md"
    md.write_text(md_table(summary_table(analysis.points, shaky)) + "\n")
    paths = [csv, md]
    if not analysis.speedups.empty:
        sp = out_dir / "speedups.csv"
        csv_frame(analysis.speedups).to_csv(sp, index=False)
        paths.append(sp)
    if not analysis.complexity.empty:
        cx = out_dir / "complexity.csv"
        csv_frame(analysis.complexity).to_csv(cx, index=False)
        paths.append(cx)
    if not analysis.scaling.empty:
        sc = out_dir / "scaling.csv"
        csv_frame(scaling_csv(analysis.scaling)).to_csv(sc, index=False)
        paths.append(sc)
    if not analysis.failed.empty:
        fl = out_dir / "failed_runs.csv"
        csv_frame(analysis.failed).to_csv(fl, index=False)
        paths.append(fl)
    return paths


def write(r: Report, out_dir: Path) -> list[Path]:
    """report.md and report.html under `out_dir`, the figures embedded in report.html from their
    files there."""
    blocks = report_blocks(r)
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(markdown_text(blocks))
    images = {rel: (out_dir / rel).read_bytes() for figs in r.figures.values() for _, rel in figs}
    html_path.write_text(html.render(blocks, images), encoding="utf-8")
    return [md_path, html_path]
