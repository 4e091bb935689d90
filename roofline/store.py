"""The measured ceilings of one device, for a train run's own roofline (roofline/run_plot.py) and
the profiles' bounds: the roofline package's only access to the tracking store.

One search over every experiment of the tracking server: FINISHED `peaks` runs whose `device_name`
is the run's, those of the same `env_label` when there are any, else those of every environment;
among them the ceilings are chosen by roofline/ceilings.py, the rule the analysis uses too (each
ceiling the highest of the most trusted runs: quiet, then load not recorded, then busy).
"""

from __future__ import annotations

from common import schema
from common.runs import mlflow_client
from roofline import ceilings
from roofline.model import Roof

MAX_PEAKS_RUNS = 200
"""the newest peaks runs of a device that are read"""


def peaks_rows(device_name: str, env_label: str, client=None) -> list[dict]:
    """The device's FINISHED peaks runs as analysis rows (`run_id`, `metrics.<key>`,
    `tags.<key>`), newest first: those of `env_label` when it has any, else every environment's."""
    from mlflow.entities import ViewType

    client = mlflow_client(client)
    exp_ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ACTIVE_ONLY)]
    if not exp_ids:
        return []
    query = (
        f"tags.{schema.TAG_RUN_KIND} = 'peaks' and attributes.status = 'FINISHED' and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(device_name, 'device name')}"
    )
    runs = client.search_runs(
        exp_ids, query, order_by=["attributes.start_time DESC"], max_results=MAX_PEAKS_RUNS
    )
    same_env = [r for r in runs if r.data.tags.get(schema.TAG_ENV_LABEL) == env_label]
    return [
        {
            "run_id": run.info.run_id,
            **{f"metrics.{k}": v for k, v in run.data.metrics.items()},
            **{f"tags.{k}": v for k, v in run.data.tags.items()},
        }
        for run in (same_env or runs)
    ]


def measured_roof(device_name: str, env_label: str, client=None) -> Roof | None:
    """The device's measured ceilings (ceilings.best_roof over peaks_rows), or None when no peaks run
    measured one."""
    return ceilings.best_roof(peaks_rows(device_name, env_label, client), device_name)
