"""`python -m train.complexity`: the run (an MLflow `complexity` run, --out files) and the command
line (see the package docstring and docs/complexity.md)."""

from __future__ import annotations

import argparse
import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

from common import console, flags, out_folder, schema, ui
from common.cli import ArgumentParser, cli_entry
from common.envinfo import environment_report, environment_tags
from common.tracking import RunSession
from train.complexity.config import ComplexityConfig
from train.complexity.markdown import markdown, summary_line
from train.complexity.measure import ComplexityResult, measure, preflight
from train.complexity.tables import (
    BATCH_COLUMNS,
    LAYER_COLUMNS,
    MODEL_COLUMNS,
    RSS_COLUMNS,
    batch_rows,
    layer_rows,
    metrics,
    model_rows,
    rss_rows,
    to_csv,
)

ARTIFACT_DIR = "complexity"


@dataclass
class ComplexityCommand:
    """Where the result goes (what is analysed: ComplexityConfig)."""

    experiment: str | None = flags.experiment()
    out: str | None = None
    """also write the tables (CSV, Markdown) into this folder."""
    track: bool = flags.track()
    no_progress: bool = flags.no_progress()


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m train.complexity",
        description="Parameters, FLOPs, activation memory and predicted training memory per model "
        "and batch size, measured at batch 1 and 2 and scaled linearly; logged as a `complexity` "
        "MLflow run.",
    )
    flags.add_flags(p, ComplexityConfig)
    flags.add_flags(p.add_argument_group("output"), ComplexityCommand)
    return p


def config_from_args(args: argparse.Namespace) -> ComplexityConfig:
    return flags.build(ComplexityConfig, args, as_flags=True)


def artifacts(result: ComplexityResult) -> dict[str, str]:
    """Artifact path -> text. `complexity/models.csv` is the stable per-model table analysis reads."""
    out = {
        f"{ARTIFACT_DIR}/models.csv": to_csv(model_rows(result), MODEL_COLUMNS),
        f"{ARTIFACT_DIR}/batches.csv": to_csv(batch_rows(result), BATCH_COLUMNS),
        f"{ARTIFACT_DIR}/summary.md": markdown(result),
    }
    for c in result.models:
        out[f"{ARTIFACT_DIR}/layers/{_file_name(c.model)}.csv"] = to_csv(
            layer_rows(c), LAYER_COLUMNS
        )
    if result.rss:
        out[f"{ARTIFACT_DIR}/rss_validation.csv"] = to_csv(rss_rows(result), RSS_COLUMNS)
    return out


def _file_name(model: str) -> str:
    return re.sub(r"[^\w.\-]", "_", model)


def run(
    cfg: ComplexityConfig,
    *,
    experiment: str | None = None,
    progress: bool = True,
    track: bool = True,
    out_dir: str | None = None,
):
    """Preflight, measure, log a `complexity` run (unless track=False) and write --out files.

    Returns (session or None, result). Bad input raises UsageError before any run exists; a failure
    while measuring ends the run FAILED with the reason and is re-raised.
    """
    device = preflight(cfg)
    if not track:
        result = measure(cfg, device, progress)
        _write_out(out_dir, artifacts(result))
        return None, result

    session = RunSession(
        "complexity",
        experiment=experiment,
        run_name=run_name(cfg, device.type),
        tags=environment_tags(str(device), cfg.env_label),
    )
    with session:
        session.log_params({**cfg.params(), "device": str(device)})
        session.set_tags({schema.TAG_INTENSITY_SOURCE: "modeled"})
        session.flush()
        result = measure(cfg, device, progress)
        session.log_params(
            {
                "device_memory_bytes": result.device_memory_bytes,
                "device_memory_source": result.device_memory_source,
                "rss_models": ",".join(result.rss_models) or "none",
            }
        )
        session.log_metrics(metrics(result))
        if result.rss_notes:
            session.set_tags({"rss_notes": "; ".join(result.rss_notes)[:5000]})
        texts = artifacts(result)
        for path, text in texts.items():
            session.log_text(path, text)
        session.log_text("environment.txt", environment_report())
        session.set_note(run_note(cfg, result))
        _write_out(out_dir, texts)
    return session, result


OUT_MARKER = ".complexity-out"
"""The file that marks an --out folder as this command's (common.out_folder.claim)."""


def _out_folder(out: str | None):
    """--out claimed (new, empty or this command's, outside a git checkout) and locked while the
    command runs; nothing without --out."""
    if not out:
        return contextlib.nullcontext()
    what = "python -m train.complexity"
    return out_folder.locked(out_folder.claim(out, "--out", OUT_MARKER, what), "--out", what)


def _write_out(out_dir: str | None, texts: dict[str, str]) -> None:
    if not out_dir:
        return
    root = Path(out_dir)
    for path, text in texts.items():
        dest = root / Path(path).relative_to(ARTIFACT_DIR)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)


def run_name(cfg, device_type: str, most: int = 3) -> str:
    """`complexity-resnet18+mobilenet_v2-224px-cpu`: the models (the first `most`, then how many
    more), the image size and the device type."""
    models = "+".join(cfg.models[:most])
    if len(cfg.models) > most:
        models += f"+{len(cfg.models) - most}more"
    return ui.run_name([models, f"{cfg.image_size}px"], device_type, kind="complexity")


def run_note(cfg, result) -> str:
    """The run's description: the summary line, then what it covered."""
    return (
        f"{summary_line(result)}\n\nCovered: models {', '.join(cfg.models)}; batch sizes "
        f"{', '.join(map(str, cfg.batch_sizes))}; {cfg.image_size}px, {cfg.precision}, "
        f"{cfg.optimizer}, {cfg.num_classes} classes; RSS check on "
        f"{', '.join(result.rss_models) or 'no model'}."
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    command = flags.build(ComplexityCommand, args)
    with _out_folder(command.out):
        session, result = run(
            cfg,
            experiment=command.experiment,
            progress=not command.no_progress,
            track=command.track,
            out_dir=command.out,
        )
    console.result(markdown(result))
    line = summary_line(result)
    if session is not None:
        line += (
            f"; kept offline in {session.spool_path}"
            if session.offline
            else f"; run {session.run_id}"
        )
    console.result(line)
    if session is not None and not session.offline:
        ui.say_links("complexity", session.run_id, session.experiment_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
