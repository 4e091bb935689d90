"""A distributed run's scaling baseline: the world-size-1 run it is compared with, found on the
tracking server, and the scaling efficiency against it (train.distributed.measure's maths)."""

from __future__ import annotations

import math

from common import schema
from common.errors import one_line
from common.runs import finished_runs
from train.config import TrainConfig
from train.distributed.measure import baseline_keys, scaling_metrics


def compare_scaling(session, cfg: TrainConfig, result) -> None:
    """Scaling efficiency of a distributed run against the mean samples/s of the FINISHED
    world-size-1 runs of the same work per process, same env label and device on the tracking
    server (same engine first, then single-process; baseline_keys), into `result`: the baseline
    analysis uses too (the mean over a point's runs, docs/schema.md). Tags say which runs they
    were, or why there is none."""
    tags = session.record.tags
    if session.offline or not session.experiment_id:
        result.tags["scaling_baseline"] = "none: the tracking server was unreachable"
        return
    same = (
        f"tags.{schema.TAG_RUN_KIND} = 'train' and "
        f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(tags[schema.TAG_ENV_LABEL])} and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(tags[schema.TAG_DEVICE_NAME])}"
    )
    for which, key in baseline_keys(cfg):
        try:
            runs = finished_runs(
                session.experiment_id, f"{same} and tags.{schema.TAG_CONFIG_KEY} = '{key}'"
            )
        except Exception as exc:  # noqa: BLE001 - the measurement stands without the comparison
            result.tags["scaling_baseline"] = f"none: cannot search the server ({one_line(exc)})"
            return
        runs = [r for r in runs if _usable(r.data.metrics.get("throughput_samples_per_s"))]
        if runs:
            base = sum(r.data.metrics["throughput_samples_per_s"] for r in runs) / len(runs)
            result.metrics.update(
                scaling_metrics(result.metrics["throughput_samples_per_s"], cfg.world_size, base)
            )
            result.metrics["scaling_baseline_n_runs"] = float(len(runs))
            result.tags["scaling_baseline"] = which
            result.tags["scaling_baseline_run_id"] = runs[0].info.run_id  # the newest
            result.tags["scaling_baseline_run_ids"] = ",".join(r.info.run_id for r in runs[:20])
            return
    result.tags["scaling_baseline"] = (
        "none: no FINISHED world-size-1 run of this configuration (config_key "
        f"{cfg.single_process_key()}) on {tags[schema.TAG_ENV_LABEL]} in this experiment"
    )


def _usable(value) -> bool:
    """A samples/s read back from the server that can be a baseline: finite and above zero."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0
