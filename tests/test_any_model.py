"""A user's own model and a timm model through train, the sweep and the breakdown; RegNet's memory
check; inception_v3's smallest size (train/models.py). Each run is tiny (batch 2, 32 px, on the
CPU); what is checked is what the run records: FINISHED, its model's source, its coverage, its
counted FLOPs against the hand count (tests/hand_count.py)."""

from __future__ import annotations

import sys

import mlflow
import torch
import pytest

from common import schema
from common.errors import UsageError
from tests.hand_count import check_model
from tests.test_models import USER, USER_MODULE
from train.sweep.spec import plan_sweep
from train.whatif.loop import Request, run_whatif

SMALL = ["--batch", "2", "--image-size", "32", "--device", "cpu", "--no-progress"]
QUICK = [*SMALL, "--warmup-iters", "1", "--iters", "1", "--no-system-metrics"]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "anynet_user_nets.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return USER


def _runs(kind: str = "train"):
    found = mlflow.search_runs(search_all_experiments=True, output_format="list")
    return [r for r in found if r.data.tags.get(schema.TAG_RUN_KIND) == kind]


def test_a_user_module_trains_counts_and_records_where_it_came_from(
    tracking, user_module, tmp_path
):
    from train.__main__ import main as train_main

    assert train_main(["--model", user_module, "--num-classes", "7", *QUICK]) == 0
    (run,) = _runs()
    tags, m = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED" and run.data.params["model"] == user_module
    assert tags[schema.TAG_MODEL_SOURCE].startswith(f"user: {user_module} (")
    assert tags[schema.TAG_MODEL_SOURCE].endswith("anynet_user_nets.py)")
    assert tags[schema.TAG_FLOPS_COVERAGE] == "complete"
    assert m[schema.METRIC_UNCOUNTED_BYTES_SHARE] == 0.0
    # 7 classes and 32 px reached the factory; its FLOPs are the hand count's
    hand = check_model(user_module, 32, num_classes=7)
    assert m["train_flops_per_step"] == hand["hand_total"]
    note = tags[schema.TAG_NOTE]
    assert f"Model: {user_module} (user: {user_module} (" in note
    assert "counted; every aten op that ran has a FLOP formula" in note
    a_whatif_of_it_trains_the_same_model(run.info.run_id, user_module, "user: ")
    # run from a folder where the module cannot be imported: refused before anything is logged
    sys.path.remove(str(tmp_path))
    sys.modules.pop("anynet_user_nets")
    with pytest.raises(UsageError, match=r"cannot import anynet_user_nets \(ModuleNotFoundError"):
        run_whatif(Request(run.info.run_id, repeats=2, moves=["channels_last"], progress=False))
    assert len(_runs("whatif")) == 1


def test_inception_v3_at_the_default_224_px_is_refused_in_one_line(tracking, capsys):
    from train.__main__ import main as train_main

    assert train_main(["--model", "inception_v3", "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: inception_v3 trains at 299 px or more (its auxiliary head, which runs in "
        "training, needs a 17 x 17 input), not 224 px: use --image-size 299"
    ]
    assert _runs() == []


def test_a_timm_model_and_a_regnet_through_one_sweep(tracking, capsys):
    """RegNet's constructor reads tensor values: its memory check (the model built on the meta
    device) ended in a traceback; it now runs without --no-memory-check. (The user module trains
    above and breaks down below.)"""
    from train.sweep.__main__ import main as sweep_main

    models = ["timm:mobilenetv3_small_050", "regnet_x_400mf"]
    argv = ["--models", *models, "--batch-sizes", "2", "--image-size", "32", "--device", "cpu"]
    argv += ["--warmup-iters", "1", "--iters", "1", "--no-progress", "--experiment", "anynet"]
    assert sweep_main(argv) == 0
    children = {r.data.params["model"]: r for r in _runs()}
    assert set(children) == set(models)
    assert all(r.info.status == "FINISHED" for r in children.values())
    timm_run = children["timm:mobilenetv3_small_050"]
    source = timm_run.data.tags[schema.TAG_MODEL_SOURCE]
    assert source.startswith("timm 1.") and source.endswith(" (pretrained_cfg input 224 px)")
    assert timm_run.data.tags[schema.TAG_FLOPS_COVERAGE] == "complete"
    hand = check_model("timm:mobilenetv3_small_050", 32)
    assert timm_run.data.metrics["train_flops_per_step"] == hand["hand_total"]
    assert "Traceback" not in capsys.readouterr().err  # a sweep's children say no notes
    # a what-if of the timm run (below for the user module, run) plans its counterfactuals with it
    from train.whatif import plan as planning
    from train.whatif import source as whatif_source

    src = whatif_source.read(timm_run.info.run_id)
    moves, _ = planning.choose(src.original, torch.device("cpu"), ["channels_last", "batch_x2"])
    planned = plan_sweep(planning.spec(src.cfg, moves, 2, src.run_id)).runs
    assert len(planned) == 6 and {c.model for c, _, _ in planned} == {"timm:mobilenetv3_small_050"}


def a_whatif_of_it_trains_the_same_model(run_id: str, spec: str, source: str) -> None:
    """python -m train.whatif of the run (one move, two repeats, a stand-in measurement: the
    real one is the train run above): every counterfactual builds `spec` and records its source.
    (Run for real on a user module and a timm model, 32 px, batch 2: docs/whatif.md.)"""
    from train.bench import BenchResult
    from train.timing import summarize

    built = []

    def measure(cfg, device, progress=True):
        built.append(cfg.model)
        times = [0.0100, 0.0101, 0.0099]
        metrics = {**summarize(times, cfg.batch_size), "measured_iters": 3.0, "wall_s": sum(times)}
        flops = {"params": 1e3, "train_flops_per_step": 1e6, "modeled_bytes_per_step": 1e5}
        rates = {"achieved_flops_per_s": 1e8, "modeled_intensity_flops_per_byte": 10.0}
        return BenchResult({**metrics, **flops, **rates}, times)

    out = run_whatif(Request(run_id, repeats=2, moves=["channels_last"], progress=False), measure)
    assert built == [spec] * 4  # the original and the move, twice
    ((row,), (wi,)) = out.rows, [r for r in _runs("whatif") if r.info.run_id == out.run_id]
    assert wi.info.status == "FINISHED" and row["move"] == "channels_last"
    assert row["measured"] == pytest.approx(1.0) and len(row["move_runs"]) == 2
    ran = set(row["move_runs"] + row["original_runs"])
    children = [r for r in _runs() if r.info.run_id in ran]
    assert len(children) == 4
    assert {r.data.params["model"] for r in children} == {spec}
    assert all(r.data.tags[schema.TAG_MODEL_SOURCE].startswith(source) for r in children)


def test_a_regnet_s_memory_check_sizes_it_and_says_how(capsys):
    from types import SimpleNamespace

    from train.memory_check import _sized

    cfg = SimpleNamespace(model="regnet_x_400mf", num_classes=1000, image_size=32)
    params, nbytes = _sized(cfg)
    assert params == 5_495_976 and nbytes == 4 * params  # torchvision's RegNet_X_400MF: 5.5 M
    err = capsys.readouterr().err
    assert "memory check: regnet_x_400mf sized with its parameters on the meta device" in err


def test_a_user_module_breaks_down(tracking, user_module, capsys):
    import pandas as pd

    from profiling.cli import main as profiling_main

    argv = ["--breakdown", "--model", user_module, *SMALL, "--warmup-iters", "1", "--iters", "2"]
    assert profiling_main(argv) == 0
    (run,) = _runs("breakdown")
    assert run.info.status == "FINISHED" and "Traceback" not in capsys.readouterr().err
    art = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="layers.csv")
    layers = pd.read_csv(art)
    convs = layers[layers.module.isin(["0", "3"]) & (layers.phase == "forward")]
    # conv 0: 3 -> 8 channels, 3x3, stride 2 on 32 px: 16x16 outputs; conv 3: 8 -> 16, groups 2
    per_sample = {"0": 2 * 16 * 16 * 8 * 3 * 9, "3": 2 * 8 * 8 * 16 * 4 * 9}
    assert dict(zip(convs.module, convs.flops)) == {k: 2 * v for k, v in per_sample.items()}


def test_incomplete_flops_are_a_finding_and_sizes_that_differ_are_in_every_label():
    """Analysis: a run whose counted FLOPs left out ops carrying >= 1 % of its bytes gets a
    finding naming them; two image sizes side by side are both labelled (224 px too), and the
    summary table has an image column."""
    import pandas as pd

    from analysis import core, markdown
    from analysis.findings import anomalies
    from tests.test_analysis_join import train

    runs = [train("a", "e", "d", 2, "fp32", 10.0), train("b", "e", "d", 2, "fp32", 20.0)]
    runs[1]["params.image_size"] = "64"
    runs[1]["tags.config_key"] += "-64"
    uncounted = "aten._scaled_dot_product_flash_attention_for_cpu"
    runs[0].update(
        {
            f"tags.{schema.TAG_FLOPS_COVERAGE}": "incomplete",
            f"tags.{schema.TAG_FLOPS_UNCOUNTED}": uncounted,
            f"metrics.{schema.METRIC_UNCOUNTED_BYTES_SHARE}": 0.026,
        }
    )
    a = core.build(pd.DataFrame(runs))
    assert sorted(a.points["label"]) == ["resnet18/b2/fp32/224px", "resnet18/b2/fp32/64px"]
    md = markdown.md_table(markdown.summary_table(a.points))
    assert "| batch | image |" in md and "| 2 | 224 px |" in md and "| 2 | 64 px |" in md
    assert anomalies.quiet_runs(a.train) == {"b"}
    (row,) = [r for r in a.train.to_dict("records") if r["run_id"] == "a"]
    found = anomalies.run_anomalies(row, None)
    assert [f.kind for f in found] == ["flops_incomplete"]
    assert (
        found[0]
        .sentence()
        .startswith(
            f"counted FLOPs incomplete: {uncounted} ran with no FLOP formula and carry 2.6% of the "
            "step's modeled bytes (run a"
        )
    )
    # a breakdown of the config measured the time of the rows that ran them: that share decides
    (timed,) = anomalies.run_anomalies(row, None, uncounted_time_share=0.12)
    assert "carry 12.0% of the step's time (the breakdown's rows that ran them)" in timed.sentence()
    assert anomalies.run_anomalies(row, None, uncounted_time_share=0.004) == []
    row[schema.METRIC_UNCOUNTED_BYTES_SHARE] = 0.005  # under 1 %: the run's own page says it
    assert anomalies.run_anomalies(row, None) == []
