"""A distributed run's scaling baseline: the world-size-1 run it is compared with, found on the
tracking server, and the scaling efficiency against it (train.distributed.measure's maths)."""

from __future__ import annotations

from common import schema
from common.errors import one_line
from train.config import TrainConfig
from train.distributed.measure import baseline_keys, scaling_metrics


def compare_scaling(session, cfg: TrainConfig, result) -> None:
    """Scaling efficiency of a distributed run against the newest FINISHED world-size-1 run of the
    same work per process, same env label and device on the tracking server (same engine first,
    then single-process; baseline_keys), into `result`. Tags say which run it was, or why there is
    none."""
    from common.runs import latest_finished_run

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
            run = latest_finished_run(
                session.experiment_id, f"{same} and tags.{schema.TAG_CONFIG_KEY} = '{key}'"
            )
        except Exception as exc:  # noqa: BLE001 - the measurement stands without the comparison
            result.tags["scaling_baseline"] = f"none: cannot search the server ({one_line(exc)})"
            return
        base = run.data.metrics.get("throughput_samples_per_s") if run is not None else None
        if base:
            result.metrics.update(
                scaling_metrics(result.metrics["throughput_samples_per_s"], cfg.world_size, base)
            )
            result.tags["scaling_baseline"] = which
            result.tags["scaling_baseline_run_id"] = run.info.run_id
            return
    result.tags["scaling_baseline"] = (
        "none: no FINISHED world-size-1 run of this configuration (config_key "
        f"{cfg.single_process_key()}) on {tags[schema.TAG_ENV_LABEL]} in this experiment"
    )
