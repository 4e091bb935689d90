"""Hostile round five, the smaller cases: what the findings, the breakdown's console, the run
session, the UI marks and a reused `--out` say or do with inputs a careless or hostile user gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from analysis import core
from common import ui
from common.tracking import RunSession
from profiling import cli
from profiling.breakdown.table import ModuleTree
from profiling.breakdown.text import view_text
from tests.test_analysis_join import profile, train
from tests.test_findings import analyse, breakdown_run, config, kinds, peaks
from tests.test_findings import train as timed
from tests.test_hostile_imports import import_argv, small_set

ROOT = Path(__file__).resolve().parents[1]
CPU = "Intel Xeon"


# ---------------------------------------------------------------- findings
@pytest.mark.parametrize("data,offered", [("synthetic", False), ("fake", True)])
def test_more_workers_are_offered_only_where_a_loader_ran(data, offered):
    """main: "more workers could remove up to 0.0 %" for a breakdown of synthetic data (one
    resident batch: no loader, no worker to add)."""
    rows = [timed("a", "box", CPU, 8, "fp32", 4.0), peaks("p", "box", CPU, 1e12)]
    b = breakdown_run("bd1", "box", CPU, 8, "fp32", {"data_wait": 0.0004, "forward": 0.9996})
    b["params"]["data"] = data
    _, found = analyse(rows, breakdowns=[b])
    assert "data_wait" not in kinds(config(found, "resnet18/b8/fp32"))
    b = breakdown_run("bd1", "box", CPU, 8, "fp32", {"data_wait": 0.3, "forward": 0.7})
    b["params"]["data"] = data
    _, found = analyse(rows, breakdowns=[b])
    assert ("data_wait" in kinds(config(found, "resnet18/b8/fp32"))) == offered


def test_a_workload_profile_is_not_told_to_time_it_with_python_m_train():
    """main: "time it there (python -m train --model deepcam ...)", a command that fails."""
    t = train("t1", "t4", "Tesla T4", 64, "fp32", 300, achieved=5e12, intensity=60)
    p = profile("p1abcdef9", "k" * 16, "Tesla V100-SXM2-16GB", env="cori")
    p.update({"params.model": "deepcam", "params.workload": "deepcam", "params.batch_size": "2"})
    notes = core.build(pd.DataFrame([t, p])).notes
    (line,) = [n for n in notes if n.startswith("profile run p1abcdef")]
    assert line.endswith(
        "placed no point: no finished train run of that config on that device; it profiles "
        "--workload deepcam, which python -m train cannot time (it times torchvision models): its "
        "counters are in the profile run, without a roofline point"
    )
    assert "python -m train --model" not in line


# ---------------------------------------------------------------- the breakdown's console
def test_long_module_names_keep_their_ends_and_never_read_alike():
    """main cut names at 30 characters with no mark: two rows both read
    `encoder.layers.encoder_layer_1`."""
    names = [
        "encoder.layers.encoder_layer_1.mlp.0",
        "encoder.layers.encoder_layer_1.self_attention",
    ]
    tree = ModuleTree("net", ["net", *names], set(names))
    rows = [
        {"module": n, "phase": "forward", "kind": "module", "leaf": True, "share": s,
         "time_s": s, "intensity_flops_per_byte": 10.0, "bound": "unknown",
         "roof_fraction": math.nan, "depth": 3, "view": True}
        for n, s in zip(names, (0.6, 0.4))
    ]  # fmt: skip
    shown = [line.split()[0] for line in view_text(rows, tree).splitlines()[2:4]]
    assert shown == ["...ayers.encoder_layer_1.mlp.0", "...oder_layer_1.self_attention"]


# ---------------------------------------------------------------- --experiment
def test_a_deleted_experiment_is_a_usage_error_before_any_run(tracking, tmp_path, capsys):
    """main: `cannot use the tracking store ...: Cannot create a run in a deleted experiment`,
    exit 1, as a store error."""
    client = mlflow.MlflowClient()
    client.delete_experiment(client.create_experiment("gone"))
    code = cli.main(import_argv(small_set(tmp_path / "set")) + ["--experiment", "gone"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and "Traceback" not in err
    assert lines == [
        "error: experiment 'gone' is deleted on this tracking server: restore it (mlflow "
        f"experiments restore --experiment-id {client.get_experiment_by_name('gone').experiment_id}"
        ") or give another --experiment"
    ]


def test_a_5000_character_experiment_is_a_usage_error(tracking, tmp_path, capsys):
    """main: `cannot use the tracking store ...: 'name' exceeds the maximum length of 500
    characters`, exit 1, as a store error."""
    code = cli.main(import_argv(small_set(tmp_path / "set")) + ["--experiment", "e" * 5000])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: experiment name 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee'... is 5,000 characters "
        "long: use at most 256"
    ]
    assert not mlflow.search_runs(search_all_experiments=True, output_format="list")


# ---------------------------------------------------------------- the saved view
def test_another_users_saved_view_of_the_same_name_is_kept(tracking, capsys):
    """main overwrote it with the project's view at the next run, silently."""
    theirs = json.dumps({"searchFilter": "tags.owner = 'me'", "orderByKey": "metrics.`loss`"})
    client = mlflow.MlflowClient()
    eid = client.create_experiment("shared", tags={ui.TAG_VIEW: theirs})
    with RunSession("train", experiment="shared") as s:
        s.log_metrics({"throughput_samples_per_s": 10.0})
    assert client.get_experiment(eid).tags[ui.TAG_VIEW] == theirs
    err = capsys.readouterr().err
    assert (
        err.count(f"experiment {eid} holds a saved view 'train-fastest' this project did not") == 1
    )
    assert "viewStateShareKey" not in ui.runs_view_hint(eid)  # the link shows filter and sort


def test_the_projects_own_view_is_still_brought_up_to_date(tracking):
    client = mlflow.MlflowClient()
    old = json.dumps({**ui.runs_view_state(), "selectedColumns": []}, sort_keys=True)
    eid = client.create_experiment("ours", tags={ui.TAG_VIEW: old})  # written before the digest
    with RunSession("train", experiment="ours"):
        pass
    tags = client.get_experiment(eid).tags
    assert tags[ui.TAG_VIEW] == ui.VIEWS["train"].envelope()
    assert ui.digest_tag(ui.VIEWS["train"]) in tags and not ui.foreign_view(tags)


# ---------------------------------------------------------------- a reused --out
def test_a_reused_out_loses_the_files_of_the_earlier_analysis_only(tmp_path):
    """main kept the figures of an earlier selection beside a report that no longer names them."""
    from analysis import out_files

    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    first = [out / "report.md", out / "figures" / "roofline_env-a.png", out / "figures" / "b.png"]
    for p in first:
        p.write_text("1")
    assert out_files.tidy(out, first) == []
    (out / "mine.txt").write_text("a user's file")
    (out / "figures" / "link.png").symlink_to(tmp_path / "elsewhere.png")
    second = [out / "report.md", out / "figures" / "b.png"]
    assert out_files.tidy(out, second) == ["figures/roofline_env-a.png"]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        ".analysis-files", "figures", "figures/b.png", "figures/link.png", "mine.txt", "report.md"
    ]  # fmt: skip
    (out / out_files.MANIFEST).write_text("../outside.txt\nfigures/link.png\nmine.txt\n")
    (tmp_path / "outside.txt").write_text("not the analysis'")
    (out / "mine.txt").unlink()
    assert out_files.tidy(out, second) == []  # never outside, never through a link
    assert (tmp_path / "outside.txt").exists() and (out / "figures" / "link.png").is_symlink()


# ---------------------------------------------------------------- docs/peaks.md
def test_docs_say_the_trust_rule_chooses_the_ceilings_not_the_latest_run():
    """main: docs/peaks.md said analysis uses the latest peaks run, while roofline/ceilings.py takes
    the highest of the most trusted."""
    text = " ".join((ROOT / "docs" / "peaks.md").read_text().split())
    assert "analysis uses the **latest**" not in text
    assert "each ceiling from the highest of the most trusted finished `peaks` runs" in text
