"""What a new user's browser opens on (issue 31): every experiment the project writes to is marked
as model development and holds the view the printed link opens; a store that refuses the marks
costs one line and the link falls back to what a URL can say. The browser side is
tests/test_ui_browser.py."""

from __future__ import annotations

import json

import mlflow
import pytest

from common import ui
from common.tracking import RunSession


def _experiment_tags(name: str) -> dict:
    return dict(mlflow.MlflowClient().get_experiment_by_name(name).tags)


def test_a_run_marks_its_experiment_and_gives_it_the_saved_view(tracking):
    """The saved views as MLflow 3.17 saves one (its Views menu lists only these), one per run
    kind; the description with their links; samples/s as the chart view's first chart."""
    with RunSession("train", experiment="fresh", run_name="b2-fp32-32px-resnet18-cpu") as s:
        s.log_metrics({"throughput_samples_per_s": 10.0})
    tags = _experiment_tags("fresh")
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    assert tags["mlflow.experiment.primaryMetric.name"] == "throughput_samples_per_s"
    envelope = json.loads(tags["mlflow.sharedViewState.train-fastest"])
    assert envelope["name"] == "Train runs, fastest first"
    assert isinstance(envelope["createdAt"], int) and isinstance(envelope["state"], str)
    view = json.loads(envelope["state"])
    for kind in ("breakdown", "analysis", "peaks", "sweep", "whatif"):
        other = json.loads(json.loads(tags[ui.VIEWS[kind].tag])["state"])
        assert other["searchFilter"] == f"tags.run_kind = '{kind}'"
    note = tags["mlflow.note.content"]
    assert note.endswith(ui.NOTE_SIGNATURE)
    for kind in ("train", "breakdown", "analysis", "peaks"):
        assert f"({ui.runs_view_path(s.experiment_id, kind=kind)})" in note
    assert view["searchFilter"] == "tags.run_kind = 'train'"
    assert (
        view["orderByKey"] == "metrics.`throughput_samples_per_s`" and view["orderByAsc"] is False
    )
    assert view["selectedColumns"][:2] == ["metrics.`samples_per_s`", "tags.`bound`"]
    assert "metrics.`fraction_of_roof_pct`" in view["selectedColumns"]
    assert view["columnOrder"][0] == "attributes.`Run Name`"
    assert view["columnWidths"]["attributes.`Run Name`"] >= 250  # whole names, not 22 characters
    link = ui.runs_view_hint(s.experiment_id)
    assert link.endswith(
        f"#/experiments/{s.experiment_id}/runs?viewStateShareKey=train-fastest&workflowType=machine_learning"
    )


def test_a_description_a_user_wrote_is_kept_and_the_analysis_answer_survives_marking(tracking):
    client = mlflow.MlflowClient()
    eid = client.create_experiment("noted", tags={"mlflow.note.content": "my own notes"})
    assert "mlflow.note.content" not in ui.experiment_tags(client.get_experiment(eid).tags, eid)
    eid2 = client.create_experiment("ours")
    ui.set_answer(client, eid2, f"{ui.ANSWER_MARK}: fastest b8 2.81 samples/s")
    note = client.get_experiment(eid2).tags["mlflow.note.content"]
    assert note.startswith(ui.ANSWER_MARK) and note.endswith(ui.NOTE_SIGNATURE)
    assert (
        ui.experiment_tags(client.get_experiment(eid2).tags, eid2).get("mlflow.note.content")
        is None
    )
    client.set_experiment_tag(eid, "mlflow.note.content", "my own notes")
    ui.set_answer(client, eid, f"{ui.ANSWER_MARK}: x")
    assert client.get_experiment(eid).tags["mlflow.note.content"] == "my own notes"


@pytest.mark.parametrize(
    "before, after",
    [
        ("genai_development", "genai_development"),  # a user's choice stays
        ("genai_development_inferred", "custom_model_development"),  # the UI's guess does not
        ("no_inferred_type", "custom_model_development"),
    ],
)
def test_a_kind_a_user_chose_is_kept_and_a_guess_replaced(tracking, before, after):
    client = mlflow.MlflowClient()
    eid = client.create_experiment("mine", tags={"mlflow.experimentKind": before})
    with RunSession("train", experiment="mine"):
        pass
    assert _experiment_tags("mine")["mlflow.experimentKind"] == after
    assert ui.experiment_tags(client.get_experiment(eid).tags, eid) == {}  # nothing left to write


def test_a_store_that_refuses_the_marks_keeps_the_run_and_the_link_falls_back(
    tracking, monkeypatch, capsys
):
    def refuse(self, *args, **kwargs):
        raise PermissionError("experiment tags are read-only here")

    monkeypatch.setattr(mlflow.MlflowClient, "set_experiment_tag", refuse)
    with RunSession("train", experiment="locked") as s:
        s.log_metrics({"throughput_samples_per_s": 10.0})
    run = mlflow.MlflowClient().get_run(s.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["throughput_samples_per_s"] == 10.0
    err = capsys.readouterr().err
    assert err.count("keeps MLflow's default view (") == 1, err
    assert "Traceback" not in err
    link = ui.runs_view_hint(s.experiment_id)
    assert "viewStateShareKey" not in link
    assert "searchFilter=tags.run_kind+%3D+%27train%27" in link and "orderByAsc=false" in link


def test_names_of_different_configurations_and_kinds_differ_in_their_first_20_characters():
    """Item 2: the UI cuts names (runs table, Group by) at about 22 characters; every pair of runs
    of different kinds or configurations below differs before that, and so do their labels."""
    from train.config import TrainConfig

    base = dict(model="resnet18", batch_size=2, image_size=32, env_label="x")
    configs = [
        TrainConfig(**base),
        TrainConfig(**{**base, "batch_size": 4}),
        TrainConfig(**{**base, "batch_size": 128}),
        TrainConfig(**base, precision="bf16"),
        TrainConfig(**base, precision="bf16", channels_last=True),
        TrainConfig(**base, channels_last=True),
        TrainConfig(**base, compile=True),
        TrainConfig(**{**base, "image_size": 224}),
        TrainConfig(**{**base, "model": "mobilenet_v3_large"}),
        TrainConfig(**{**base, "model": "mobilenet_v3_large"}, channels_last=True),
        TrainConfig(**base, distributed="ddp", world_size=2, backend="gloo"),
        TrainConfig(**base, distributed="ddp", world_size=4, backend="gloo"),
        TrainConfig(**base, distributed="deepspeed", world_size=2, zero_stage=2),
        TrainConfig(**base, distributed="deepspeed", world_size=2, zero_stage=3),
    ]
    names = [c.run_name("cuda") for c in configs]
    names += [configs[0].run_name("cuda", kind="breakdown"), configs[0].run_name(kind="ncu")]
    labels = [c.config_label() for c in configs]
    for group in (names, labels):
        heads = [n[:20] for n in group]
        same = [(a, b) for i, a in enumerate(group) for b in group[i + 1 :] if a[:20] == b[:20]]
        assert len(set(heads)) == len(group), same
    # the sweep's repeats keep the configuration's name and end with the repeat
    assert configs[0].run_name("cpu", 1) == "b2-fp32-32px-resnet18-cpu-r1"
    assert (
        ui.run_name(["resnet18", "32px"], "cpu", kind="complexity")
        == "complexity-resnet18-32px-cpu"
    )


def test_fractions_the_pages_print_as_percentages_are_logged_beside_them(tracking):
    """Item 3: 0.7157... shows as 71.6 in the runs table, as the pages say it; a non-finite
    fraction gets no percentage."""
    assert ui.with_percents({"fraction_of_roof": 0.715712, "x": 2.0}) == {
        "fraction_of_roof": 0.715712,
        "x": 2.0,
        "fraction_of_roof_pct": 71.6,
    }
    shown = ui.with_percents(
        {"throughput_samples_per_s": 2.80684018652, "step_time_mean_s": 2.85018}
    )
    assert shown["samples_per_s"] == 2.81 and shown["step_time_mean_ms"] == 2850.0
    assert ui.with_percents({"scaling_efficiency": float("nan")}).keys() == {"scaling_efficiency"}
    with RunSession("train", experiment="pct") as s:
        s.log_metrics({"fraction_of_roof": 0.0104, "scaling_efficiency": 1.23456})
    m = mlflow.MlflowClient().get_run(s.run_id).data.metrics
    assert m["fraction_of_roof_pct"] == 1.0 and m["scaling_efficiency_pct"] == 123.5
    assert m["fraction_of_roof"] == 0.0104  # the fraction itself as measured


def test_a_wide_report_table_is_shown_as_numbered_parts_that_fit_the_artifact_viewer():
    """Item 4: the summary's 15 columns (1191 px at MLflow's ~950 px viewer) become two parts of
    at most 9 columns (`#` included), each row numbered in both; a narrow table stays as it is. The widths in a
    browser: tests/test_ui_browser.py."""
    from analysis import html
    from analysis.markdown import Table

    wide = Table([f"h{i}" for i in range(15)], [[f"r{r}c{i}" for i in range(15)] for r in range(3)])
    parts = html.table_parts(wide)
    assert [t.headers for t in parts] == [
        ["#", *(f"h{i}" for i in range(8))],
        ["#", *(f"h{i}" for i in range(8, 15))],
    ]
    assert parts[1].rows[2] == [3, *(f"r2c{i}" for i in range(8, 15))]
    page = html.table_html(wide)
    assert page.count("<table>") == 2 and "<td>r2c14</td>" in page and "Continued" in page
    narrow = Table(["a", "b"], [[1, 2]])
    assert html.table_parts(narrow) == [narrow] and "Continued" not in html.table_html(narrow)
