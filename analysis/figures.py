"""Which figures an analysis draws, and drawing them side by side.

`plan()` lists the figures of an Analysis as FigureJobs (report section, title, the drawing
function, its arguments: only the rows and columns it draws, the output path); `render()` draws
them, in forked processes when asked: each figure is independent and matplotlib's drawing holds
the GIL, so processes are what runs them side by side. With a FigureCache
(analysis/figure_cache.py) a figure whose arguments are those of a figure drawn before is copied
instead of drawn, and matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.core import Analysis
from analysis.figure_cache import FigureCache
from common.fmt import slug


@dataclass(frozen=True)
class FigureJob:
    """One figure of the report: its section and title; `draw(*args, out)` writes it to `out`."""

    section: str
    title: str
    draw: Callable[..., Path]
    args: tuple
    out: Path

    def run(self) -> Path:
        """Draw the figure; the path written."""
        return self.draw(*self.args, self.out)


PANEL_COLUMNS = ["env_label", "device_name", "batch_size", "label"]
"""what the per-environment batch-size panels (plots._per_env_lines) read besides y and its error."""
ROOFLINE_COLUMNS = [
    "env_label",
    "device_name",
    "label",
    "precision",
    "ceiling_dtype",
    "intensity_source",
    "intensity_flops_per_byte",
    "intensity_l2_flops_per_byte",
    "intensity_l1_flops_per_byte",
    "achieved_flops_per_s",
]
"""what roofline.plot reads of the points it draws."""
SECTION_ORDER = ("roofline", "throughput", "variability", "intensity", "speedup", "scaling")
"""the report's order of the figure sections."""


def plan(
    analysis: Analysis,
    fig_dir: Path,
    variability: tuple[str, dict[tuple[str, str], list[float]]] | None = None,
) -> list[FigureJob]:
    """The figures of `analysis` under `fig_dir`; `variability` = (config label, step times per
    (env_label, device_name)) adds the step-time box plot."""
    jobs: list[FigureJob] = []
    if not analysis.speedups.empty:
        rows = panel_rows(analysis.speedups, "speedup", "speedup_ci95_low", "speedup_ci95_high")
        jobs.append(
            _named(fig_dir, "speedup", "fp16/bf16 speed-up over fp32", speedup_vs_batch, rows)
        )
    if not analysis.scaling.empty:
        jobs.append(
            _named(
                fig_dir, "scaling", "Data-parallel scaling", scaling_vs_world_size, analysis.scaling
            )
        )
    pts = analysis.points
    intensity = panel_rows(pts, "intensity_flops_per_byte", "intensity_source")
    thr = panel_rows(pts, "throughput_mean_samples_per_s", "throughput_sd_samples_per_s")
    jobs.append(
        _named(fig_dir, "intensity", "Intensity vs batch size", intensity_vs_batch, intensity)
    )
    jobs.append(_named(fig_dir, "throughput", "Throughput vs batch size", throughput_vs_batch, thr))
    jobs += _roofline_jobs(analysis, fig_dir)
    if variability is not None:
        label, by_env = variability
        long_title = f"Step-time variability across environments: {label}"
        short = f"Step-time variability: {label}"
        jobs.append(
            _named(fig_dir, "variability", short, step_time_variability, by_env, long_title)
        )
    return jobs


def _named(fig_dir: Path, section: str, title: str, draw: Callable[..., Path], *args) -> FigureJob:
    """The job of a figure whose file is named after its drawing function."""
    return FigureJob(section, title, draw, args, fig_dir / f"{draw.__name__}.png")


def _roofline_jobs(analysis: Analysis, fig_dir: Path) -> list[FigureJob]:
    """All environments on one roofline, then one per environment, each in a file named by a slug
    of its env label (with the device when one label has several; never two files of one name)."""
    pts = roofline_rows(analysis.points)
    jobs = [
        FigureJob(
            "roofline",
            "Roofline, all environments",
            roofline_combined,
            (pts, analysis.roofs),
            fig_dir / "roofline_all.png",
        )
    ]
    envs = sorted(analysis.roofs)
    used_slugs: set[str] = set()
    for env, dev in envs:
        name = slug(env) if len(envs) == len({e for e, _ in envs}) else slug(f"{env}_{dev}")
        while name in used_slugs:
            name += "_"
        used_slugs.add(name)
        sub = pts[(pts["env_label"] == env) & (pts["device_name"] == dev)]
        jobs.append(
            FigureJob(
                "roofline",
                f"Roofline, {env} ({dev})",
                roofline_env,
                (sub, env, dev, analysis.roofs[(env, dev)]),
                fig_dir / f"roofline_{name}.png",
            )
        )
    return jobs


def panel_rows(frame: pd.DataFrame, y: str, *extra: str) -> pd.DataFrame:
    """What a batch-size panel figure draws of `frame`: the rows with a `y` and a batch size, in
    order, plus one row per environment that has none (its panel says so), in the columns it reads
    (PANEL_COLUMNS, `y`, `extra`). The figure is the one the whole frame gives."""
    cols = [c for c in [*PANEL_COLUMNS, y, *extra] if c in frame]
    drawn = frame[y].notna() & pd.to_numeric(frame["batch_size"], errors="coerce").gt(0)
    envs = frame[["env_label", "device_name"]].drop_duplicates()
    seen = set(zip(frame.loc[drawn, "env_label"], frame.loc[drawn, "device_name"]))
    empty = envs[[(e, d) not in seen for e, d in zip(envs["env_label"], envs["device_name"])]]
    out = frame.loc[drawn, cols]
    if not empty.empty:
        out = pd.concat([out, empty.reindex(columns=cols)], ignore_index=True)
    return out.reset_index(drop=True)


def roofline_rows(points: pd.DataFrame) -> pd.DataFrame:
    """What a roofline figure draws of `points`: the rows roofline.plot plots (positive intensity
    and achieved FLOP/s), in order, in the columns it reads (ROOFLINE_COLUMNS)."""
    drawn = points["intensity_flops_per_byte"].gt(0) & points["achieved_flops_per_s"].gt(0)
    return points.loc[drawn, [c for c in ROOFLINE_COLUMNS if c in points]].reset_index(drop=True)


def default_jobs() -> int:
    """Figure processes when --jobs is 0: up to 4 on Linux (fork is cheap there), else 1."""
    return min(4, os.cpu_count() or 1) if sys.platform.startswith("linux") else 1


class Pending:
    """Figures being drawn: those restored from the cache, and what waits for those sent to a
    figure_pool.FigurePool (or the jobs left to draw here). `finish()` waits for them."""

    def __init__(self, jobs: list[FigureJob], n_jobs: int, cache: FigureCache | None, pool) -> None:
        self.jobs, self.n_jobs, self.cache = jobs, n_jobs, cache
        self.keys = [cache.key(j.draw.__qualname__, j.args) if cache else None for j in jobs]
        self.paths: dict[int, Path] = {}
        for i, (job, key) in enumerate(zip(jobs, self.keys)):
            if cache is not None and cache.restore(key, Path(job.out)):
                self.paths[i] = Path(job.out)
        self.todo = [i for i in range(len(jobs)) if i not in self.paths]
        self.wait = pool.submit_all([jobs[i] for i in self.todo]) if pool and self.todo else None

    def finish(self) -> list[tuple[str, str, Path]]:
        """(section, title, path) of every job in the report's order (rooflines first), once
        drawn; the cache keeps those drawn and is pruned."""
        if self.wait is not None:
            drawn = [Path(p) for p in self.wait()]
        else:
            drawn = draw_all([self.jobs[i] for i in self.todo], self.n_jobs)
        for i, path in zip(self.todo, drawn):
            self.paths[i] = path
            if self.cache is not None:
                self.cache.keep(self.keys[i], path)
        if self.cache is not None:
            self.cache.prune()
        out = [(job.section, job.title, self.paths[i]) for i, job in enumerate(self.jobs)]
        return sorted(out, key=lambda d: SECTION_ORDER.index(d[0]))


def render(
    jobs: list[FigureJob], n_jobs: int, cache: FigureCache | None = None, pool=None
) -> list[tuple[str, str, Path]]:
    """Draw the jobs, copying from `cache` those drawn before from the same arguments: in the
    processes of `pool` (figure_pool.FigurePool) when given, else in `n_jobs` processes forked
    now when > 1; returns (section, title, path) in the report's order (rooflines first)."""
    return Pending(jobs, n_jobs, cache, pool).finish()


def draw_all(jobs: list[FigureJob], n_jobs: int) -> list[Path]:
    """Draw `jobs`, in `n_jobs` processes forked now when > 1 (the drawing modules imported
    first, once); the paths written, in order."""
    if not jobs:
        return []
    import_drawing()  # once here, before the processes fork
    if n_jobs <= 1 or len(jobs) <= 1:
        return [j.run() for j in jobs]
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)), mp_context=ctx) as pool:
        return list(pool.map(FigureJob.run, jobs))


# ------------------------------------------------------------------ the drawing functions
# Each imports its module when a figure is drawn: analysis.plots imports matplotlib (0.4-0.6 s,
# `python -X importtime -c "import analysis.plots"`), which a process drawing nothing does without.
def import_drawing() -> None:
    """Import the modules that draw (matplotlib with them)."""
    from analysis import plots, scaling_plot  # noqa: F401


def speedup_vs_batch(rows: pd.DataFrame, out: Path) -> Path:
    from analysis import plots

    return plots.speedup_vs_batch(rows, out)


def scaling_vs_world_size(rows: pd.DataFrame, out: Path) -> Path:
    from analysis import scaling_plot

    return scaling_plot.scaling_vs_world_size(rows, out)


def intensity_vs_batch(rows: pd.DataFrame, out: Path) -> Path:
    from analysis import plots

    return plots.intensity_vs_batch(rows, out)


def throughput_vs_batch(rows: pd.DataFrame, out: Path) -> Path:
    from analysis import plots

    return plots.throughput_vs_batch(rows, out)


def step_time_variability(series: dict, title: str, out: Path) -> Path:
    from analysis import plots

    return plots.step_time_variability(series, title, out)


def roofline_combined(points: pd.DataFrame, roofs: dict, out: Path) -> Path:
    from analysis import plots

    return plots.roofline_combined(points, roofs, out)[0]


def roofline_env(points: pd.DataFrame, env: str, device: str, roofset: dict, out: Path) -> Path:
    from analysis import plots

    return plots.roofline_env(points, env, device, roofset, out)[0]
