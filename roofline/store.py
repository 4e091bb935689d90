"""The latest peaks run of one device, for a train run's own roofline (roofline/run_plot.py): the
roofline package's only access to the tracking store.

One search over every experiment of the tracking server: FINISHED `peaks` runs whose `device_name`
is the run's, the one of the same `env_label` first, else the latest of any environment.
"""

from __future__ import annotations

from common import schema
from common.runs import mlflow_client


def latest_peaks_row(device_name: str, env_label: str, client=None) -> dict | None:
    """The peaks run as an analysis row (`run_id`, `metrics.<key>`, `tags.<key>`), or None."""
    from mlflow.entities import ViewType

    client = mlflow_client(client)
    exp_ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ACTIVE_ONLY)]
    if not exp_ids:
        return None
    query = (
        f"tags.{schema.TAG_RUN_KIND} = 'peaks' and attributes.status = 'FINISHED' and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(device_name, 'device name')}"
    )
    runs = client.search_runs(
        exp_ids, query, order_by=["attributes.start_time DESC"], max_results=50
    )
    if not runs:
        return None
    same_env = [r for r in runs if r.data.tags.get(schema.TAG_ENV_LABEL) == env_label]
    run = (same_env or runs)[0]
    return {
        "run_id": run.info.run_id,
        **{f"metrics.{k}": v for k, v in run.data.metrics.items()},
        **{f"tags.{k}": v for k, v in run.data.tags.items()},
    }
