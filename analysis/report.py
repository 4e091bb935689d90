"""The report (report.md, report.html) and the table files (CSV with raw SI values, Markdown for
reading).

`report_blocks` is pure (an Analysis in, the report as a list of blocks out; the tables come from
analysis/markdown.py); `markdown_text` renders the blocks as report.md, analysis/html.py as
report.html; `write_tables` is the edge that writes the table files.
"""

from __future__ import annotations

from pathlib import Path

from analysis.core import Analysis
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


def report_blocks(
    analysis: Analysis,
    figures: dict[str, list[tuple[str, str]]],
    source: str,
    query: str,
    generated: str,
    variability_title: str = "",
) -> list[Block]:
    """The report as blocks (report.md and report.html render the same blocks): figures are
    relative paths (title, path) grouped by section key."""

    def figs(key: str) -> list[Block]:
        return [("figure", t, p) for t, p in figures.get(key, [])]

    out = _opening(analysis, source, query, generated) + figs("roofline")
    out += [
        ("h2", "Summary"),
        (
            "p",
            "Raw SI values, run ids and every roofline quantity: `summary.csv`, next to this "
            "report (the analysis run's artifact `report/summary.csv`).",
        ),
        ("table", summary_table(analysis.points)),
        ("h2", "Throughput vs batch size"),
    ]
    out += figs("throughput")
    out += [("h2", "Step-time variability")]
    out += [("p", variability_title)] if variability_title else []
    out += figs("variability") or [("p", "No step_time_s series to plot.")]
    out += [("h2", "Intensity vs batch size")] + figs("intensity")
    out += _speedups(analysis, figs("speedup"))
    if not analysis.scaling.empty:
        out += [("h2", "Scaling with world size"), ("p", SCALING_INTRO)]
        out += figs("scaling") + [("table", scaling_table(analysis.scaling))]
    out += _complexity(analysis)
    out += [("h2", "Failed runs")]
    out += (
        [("table", failed_table(analysis.failed))]
        if not analysis.failed.empty
        else [("p", "None.")]
    )
    out += [("h2", "Method"), ("list", METHOD)]
    return out


def _opening(analysis: Analysis, source: str, query: str, generated: str) -> list[Block]:
    """Title, what was read, what is missing, the environments, their ceilings and the rooflines'
    legend."""
    c = analysis.counts
    return [
        ("h1", "Training performance and roofline report"),
        ("p", f"Generated {generated} from `{source}`; runs: {query}."),
        (
            "p",
            f"Runs used: {c.get('train', 0)} finished train, {c.get('profile', 0)} profile, "
            f"{c.get('peaks', 0)} peaks; {c.get('failed', 0)} failed (listed below). "
            f"Points (environment × config): {c.get('points', 0)}, {c.get('measured_points', 0)} "
            f"with measured intensity, {c.get('modeled_points', 0)} with modeled intensity.",
        ),
        ("h2", "Implausible values"),
        ("list", list(analysis.flags))
        if analysis.flags
        else ("p", "None: no point above its roof, no scaling over 100%, no CI over ±50%."),
        ("h2", "What is missing"),
        ("list", list(analysis.notes))
        if analysis.notes
        else ("p", "Nothing: every point has an intensity and a roof."),
        ("h2", "Environments"),
        ("table", environments_table(analysis.environments)),
        ("h2", "Ceilings"),
        ("table", roofs_table(analysis.roofs)),
        ("h2", "Rooflines"),
        (
            "p",
            "Filled circles: intensity measured with Nsight Compute; hollow triangles: modeled "
            "intensity. Solid ceilings: measured peaks; dashed: vendor / peaks file.",
        ),
    ]


def _speedups(analysis: Analysis, figs: list[Block]) -> list[Block]:
    out: list[Block] = [("h2", "fp16/bf16 speed-up over fp32")]
    if analysis.speedups.empty:
        return out + [
            (
                "p",
                "No configuration has both an fp32 and an fp16/bf16 run in the same environment.",
            )
        ]
    return out + figs + [("table", speedups_table(analysis.speedups))]


def _complexity(analysis: Analysis) -> list[Block]:
    out: list[Block] = [("h2", "Model complexity")]
    if analysis.complexity.empty:
        return out + [
            (
                "p",
                "No `complexity` run in these experiments (`python -m train.complexity` logs one).",
            )
        ]
    return out + [("p", COMPLEXITY_INTRO), ("table", complexity_table(analysis.complexity))]


def first_section(blocks: list[Block]) -> int:
    """Index of the report's first section heading: a section inserted there comes first."""
    return next((i for i, b in enumerate(blocks) if b[0] == "h2"), len(blocks))


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


def write_tables(analysis: Analysis, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / "summary.csv"
    csv_frame(summary_frame(analysis.points)).to_csv(csv, index=False)
    md = out_dir / "summary.md"
    md.write_text(md_table(summary_table(analysis.points)) + "\n")
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
