"""Which figures an analysis draws, and drawing them side by side.

`plan()` lists the figures of an Analysis as jobs (report section, title, figure function, its
arguments); `render()` draws them, in forked processes when asked: each figure is independent and
matplotlib's drawing holds the GIL, so processes are what runs them side by side.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from analysis import plots, scaling_plot
from analysis.core import Analysis
from common.fmt import slug

Job = tuple[str, str, Callable, tuple]
"""(report section, title, figure function, its arguments)."""
SECTION_ORDER = {
    "roofline": 0,
    "throughput": 1,
    "variability": 2,
    "intensity": 3,
    "speedup": 4,
    "scaling": 5,
}


def plan(
    analysis: Analysis,
    fig_dir: Path,
    variability: tuple[str, dict[tuple[str, str], list[float]]] | None = None,
) -> list[Job]:
    """The figures of `analysis` under `fig_dir`; `variability` = (config label, step times per
    (env_label, device_name)) adds the step-time box plot."""
    pts = analysis.points
    jobs: list[Job] = []
    if not analysis.speedups.empty:
        jobs.append(
            (
                "speedup",
                "fp16/bf16 speed-up over fp32",
                plots.speedup_vs_batch,
                (analysis.speedups, fig_dir / "speedup_vs_batch.png"),
            )
        )
    if not analysis.scaling.empty:
        jobs.append(
            (
                "scaling",
                "Data-parallel scaling",
                scaling_plot.scaling_vs_world_size,
                (analysis.scaling, fig_dir / "scaling_vs_world_size.png"),
            )
        )
    jobs.append(
        (
            "intensity",
            "Intensity vs batch size",
            plots.intensity_vs_batch,
            (pts, fig_dir / "intensity_vs_batch.png"),
        )
    )
    jobs.append(
        (
            "throughput",
            "Throughput vs batch size",
            plots.throughput_vs_batch,
            (pts, fig_dir / "throughput_vs_batch.png"),
        )
    )
    jobs += _roofline_jobs(analysis, fig_dir)
    if variability is not None:
        label, by_env = variability
        jobs.append(
            (
                "variability",
                f"Step-time variability: {label}",
                plots.step_time_variability,
                (
                    by_env,
                    f"Step-time variability across environments: {label}",
                    fig_dir / "step_time_variability.png",
                ),
            )
        )
    return jobs


def _roofline_jobs(analysis: Analysis, fig_dir: Path) -> list[Job]:
    """All environments on one roofline, then one per environment, each in a file named by a slug
    of its env label (with the device when one label has several; never two files of one name)."""
    pts = analysis.points
    jobs: list[Job] = [
        (
            "roofline",
            "Roofline, all environments",
            plots.roofline_combined,
            (pts, analysis.roofs, fig_dir / "roofline_all.png"),
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
            (
                "roofline",
                f"Roofline, {env} ({dev})",
                plots.roofline_env,
                (sub, env, dev, analysis.roofs[(env, dev)], fig_dir / f"roofline_{name}.png"),
            )
        )
    return jobs


def default_jobs() -> int:
    """Figure processes when --jobs is 0: up to 4 on Linux (fork is cheap there), else 1."""
    return min(4, os.cpu_count() or 1) if sys.platform.startswith("linux") else 1


def _draw(job: Job) -> Path:
    out = job[2](*job[3])
    return out[0] if isinstance(out, tuple) else out


def render(jobs: list[Job], n_jobs: int) -> list[tuple[str, str, Path]]:
    """Draw the jobs, in `n_jobs` forked processes when > 1; returns (section, title, path) in the
    report's order (rooflines first)."""
    if n_jobs <= 1 or len(jobs) <= 1:
        paths = [_draw(j) for j in jobs]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)), mp_context=ctx) as pool:
            paths = list(pool.map(_draw, jobs))
    drawn = [(section, title, path) for (section, title, _, _), path in zip(jobs, paths)]
    return sorted(drawn, key=lambda d: SECTION_ORDER[d[0]])
