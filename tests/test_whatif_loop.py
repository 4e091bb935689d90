"""python -m train.whatif against a planted store: a peaks run and a breakdown run whose rows give
hand-computed predictions (tests/test_whatif.py's), and a stand-in train whose step time per
configuration is known, so every verdict is known before the what-if runs."""

from __future__ import annotations

import json

import mlflow
import pytest

import train.run
from bench.whatif_overhead import overhead
from common import schema
from common.envinfo import device_name
from common.errors import UsageError
from common.runs import artifact_text
from common.tracking import RunSession
from train.bench import BenchResult
from train.config import TrainConfig
from train.run import RunOptions
from train.timing import summarize
from train.whatif.__main__ import main
from train.whatif.loop import Request, run_whatif
from train.whatif.runlog import PREDICTED_AT_MS, PREDICTIONS

EXP = "whatif-test"
LABEL = "wi-box"
CFG = dict(model="resnet18", batch_size=2, image_size=32, iters=3, warmup_iters=1, device="cpu")
LAYERS = (
    "module,phase,kind,depth,leaf,share,flops,bytes\n"
    "layer.conv,forward,module,2,True,0.5,1000000000,10000000\n"
    "layer.bn,backward,module,2,True,0.3,0,10000000\n"
    "optimizer,optimizer,step,-1,False,0.2,,\n"
)
# mean step time per configuration and repeat: bf16 x1.5 (predicted x1.31-1.67: held),
# channels_last x1.5 (predicted x1: beaten), compile x0.5 (predicted x1-1.43: missed), twice the
# batch unstable (100 ms, then 300 ms: not judged), half the batch fails (FAILED, not judged)
STEPS = {
    "original": (0.100, 0.1002),
    "bf16": (0.0667, 0.0668),
    "channels_last": (0.0667, 0.0666),
    "compile": (0.200, 0.2004),
    "batch_x2": (0.100, 0.300),
}
MOVES = ["bf16", "channels_last", "compile", "batch_x2", "batch_half"]
FAILS = "planted: a batch norm at batch 1"
REASON = f"RuntimeError: {FAILS}"  # the FAILED run's one-line reason


def which(cfg: TrainConfig) -> str:
    if cfg.precision == "bf16":
        return "bf16"
    if cfg.channels_last:
        return "channels_last"
    if cfg.compile:
        return "compile"
    return {4: "batch_x2", 1: "batch_half"}.get(cfg.batch_size, "original")


class StandIn:
    """A train run's measurement whose step times are STEPS' (`stop_after` calls, then Ctrl-C)."""

    def __init__(self, stop_after: int | None = None, after: "StandIn | None" = None):
        self.calls: list[str] = []
        self.stop_after = stop_after
        self.seen = list(after.calls) if after else []  # a resumed what-if's earlier calls

    def __call__(self, cfg, device, progress=True) -> BenchResult:
        if self.stop_after is not None and len(self.calls) >= self.stop_after:
            raise KeyboardInterrupt
        name = which(cfg)
        self.calls.append(name)
        if name == "batch_half":
            raise RuntimeError(FAILS)
        step = STEPS[name][sum(c == name for c in self.seen + self.calls[:-1]) % 2]
        times = [step * (1 + 1e-4 * i) for i in (-1, 0, 1)]
        metrics = summarize(times, cfg.batch_size)
        metrics.update(
            measured_iters=3.0,
            step_time_ci95_rel=0.001,
            params=1e6,
            train_flops_per_step=1e9,
            achieved_flops_per_s=1e9 / step,
            modeled_bytes_per_step=1e8,
            modeled_intensity_flops_per_byte=10.0,
            wall_s=sum(times),
        )
        return BenchResult(metrics, times)


@pytest.fixture
def store(tracking, monkeypatch):
    """The planted store: peaks (fp32 10 GFLOP/s, bf16 20, DRAM 10 GB/s), a breakdown of the
    configuration, and its original train run (measured by the stand-in); returns its run id."""
    monkeypatch.setattr(train.run, "log_roofline", lambda *a, **k: "")  # no figure per run
    plant_peaks(bf16=2e10)
    cfg = TrainConfig(**CFG, env_label=LABEL)
    tags = {
        schema.TAG_ENV_LABEL: LABEL,
        schema.TAG_DEVICE_NAME: device_name("cpu"),
        schema.TAG_DEVICE_TYPE: "cpu",
        schema.TAG_CONFIG_KEY: cfg.config_key(),
    }
    with RunSession("breakdown", experiment=EXP, tags=tags) as bd:
        bd.log_params(cfg.params())
        bd.log_text("layers.csv", LAYERS)
    options = RunOptions(EXP, progress=False, system_metrics=False)
    session, _ = train.run.run(cfg, options, measure=StandIn())
    return session.run_id


def plant_peaks(bf16: float) -> None:
    tags = {schema.TAG_ENV_LABEL: LABEL, schema.TAG_DEVICE_NAME: device_name("cpu")}
    with RunSession("peaks", experiment=EXP, tags=tags) as peaks:
        peaks.log_metrics(
            {
                "peak_flops_per_s_fp32": 1e10,
                "peak_flops_per_s_bf16": bf16,
                "peak_dram_bytes_per_s": 1e10,
            }
        )


def _args(r: dict) -> tuple:
    keys = ("move", "predicted_low", "predicted_high", "measured", "measured_low", "measured_high")
    return (*(r[k] for k in keys), r["verdict"])


def test_predictions_first_verdicts_and_an_interrupted_whatif_resumes(store, tmp_path):
    """Interrupted in its second pass, then run again with other ceilings in the store: the
    finished runs are not run again (the failed one is), the logged predictions stand, every
    verdict is the planted one, a failing move is FAILED with its reason while the others go on,
    and the predictions were sent before any counterfactual started."""
    req = Request(store, repeats=2, moves=MOVES, experiment=EXP, progress=False)
    first = StandIn(stop_after=7)  # the original and 5 moves, the original again, then Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        run_whatif(req, measure=first)
    (wi,) = mlflow.search_runs(
        experiment_names=[EXP], filter_string="tags.run_kind = 'whatif'", output_format="list"
    )
    assert wi.info.status == "KILLED"
    logged = artifact_text(wi.info.run_id, PREDICTIONS)
    plant_peaks(bf16=4e10)  # a fresh prediction of bf16 would differ now

    again = StandIn(after=first)
    out = run_whatif(req, measure=again)
    assert again.calls == ["batch_half", *MOVES]  # the failed run, then the second pass
    assert out.run_id == wi.info.run_id and artifact_text(out.run_id, PREDICTIONS) == logged
    rows = {r["move"]: r for r in out.rows}
    assert {m: r["verdict"] for m, r in rows.items()} == {
        "bf16": "held",
        "channels_last": "beaten",
        "compile": "missed",
        "batch_x2": "not judged",
        "batch_half": "not judged",
    }
    bf16 = rows["bf16"]
    assert (bf16["predicted_low"], bf16["predicted_high"]) == pytest.approx((1 / 0.762, 1 / 0.6))
    assert bf16["measured"] == pytest.approx(0.1001 / 0.06675, rel=1e-6)
    assert "batch_x2 is unstable" in rows["batch_x2"]["why"]
    assert f"its runs did not measure: failed: {REASON}" in rows["batch_half"]["why"]
    assert len(bf16["move_runs"]) == 2 and len(bf16["original_runs"]) == 2

    run = mlflow.tracking.MlflowClient().get_run(out.run_id)
    at_ms = run.data.metrics[PREDICTED_AT_MS]
    trains = [
        r
        for r in mlflow.search_runs(
            experiment_names=[EXP], filter_string="tags.run_kind = 'train'", output_format="list"
        )
        if r.info.run_id != store
    ]
    assert at_ms < min(r.info.start_time for r in trains)
    ended = sorted((r.info.status, r.data.tags.get("error", "")) for r in trains)
    # 10 finished, 1 killed by the Ctrl-C, batch_half's 2 runs and the rerun of its first FAILED
    assert ended == [
        *[("FAILED", REASON)] * 3,
        *[("FINISHED", "")] * 10,
        ("KILLED", "interrupted by the user"),
    ]
    assert run.info.status == "FINISHED" and run.data.tags["whatif_compile_verdict"] == "missed"
    assert json.loads(logged)["moves"][0]["predicted_high"] == pytest.approx(1 / 0.6)
    cost = overhead(out.run_id, mlflow.tracking.MlflowClient())  # bench/whatif_overhead.py's
    assert cost["train_runs"] == 14 and 0 < cost["train_runs_s"] < cost["loop_s"]
    the_report_shows_the_checks_as_logged(out.rows, tmp_path)


def the_report_shows_the_checks_as_logged(rows: list[dict], tmp_path) -> None:
    """python -m analysis over the same store: "How good is the advice" and the moves of "What
    would move it" print the what-if table's own numbers (check_text of its rows), the figure is
    drawn, and findings.json's move findings carry their check."""
    from analysis import app
    from roofline.scoring import check_text

    cfg = app.config_from_args(
        app.build_parser().parse_args(["--no-track", "--jobs", "1", "--out", str(tmp_path / "r")])
    )
    result = app.run(cfg)
    md = (tmp_path / "r" / "report.md").read_text()
    advice = md[md.index("## How good is the advice") : md.index("## Implausible values")]
    for r in rows:
        want = check_text(
            r["move"], r["predicted_low"], r["predicted_high"], r["measured"], r["measured_low"],
            r["measured_high"], r["verdict"],
        )  # fmt: skip
        assert f"- {want}" in advice, want
    assert "| compile | 1 | 0 | 0 | 1 | 0 | 0 |" in advice  # per knob: 1 check, missed
    assert (tmp_path / "r" / "figures" / "whatif_checks.png").stat().st_size > 0
    checked = [
        f.values["check"]
        for c in result.findings.configs
        for f in c["findings"]
        if f.topic == "move" and "check" in f.values
    ]
    assert checked and set(checked) <= {check_text(*_args(r)) for r in rows}
    assert f"Checked by a what-if: {checked[0]}." in md


def test_budget_leaves_out_what_will_not_fit_with_a_line(store, capsys):
    """Nothing fits in a millisecond: both moves are left out up front, the original's runs right
    before each would start (no run is made), and the table still shows the predictions."""
    argv = [store, "--moves", "bf16", "compile", "--budget-s", "0.001", "--no-progress"]
    code = main([*argv, "--experiment", EXP])
    out = capsys.readouterr().out
    trains = mlflow.search_runs(
        experiment_names=[EXP], filter_string="tags.run_kind = 'train'", output_format="list"
    )
    assert code == 0 and [r.info.run_id for r in trains] == [store]
    assert "not run: bf16: left out by --budget-s 0.001" in out
    assert "not run: compile: left out by --budget-s 0.001" in out
    assert "| bf16 | x1.31-1.67 |  | not judged |  |" in out


def test_what_it_cannot_do_is_refused_in_one_line(tracking):
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment(EXP)

    def finished(tags: dict, params: dict) -> str:
        run = client.create_run(exp, tags={schema.TAG_RUN_KIND: "train", **tags})
        for k, v in params.items():
            client.log_param(run.info.run_id, k, v)
        client.set_terminated(run.info.run_id)
        return run.info.run_id

    params = {**{k: str(v) for k, v in CFG.items()}, "precision": "fp32"}
    elsewhere = finished({schema.TAG_DEVICE_NAME: "Elsewhere CPU 9000"}, params)
    bare = finished({schema.TAG_DEVICE_NAME: device_name("cpu")}, {"model": "resnet18"})
    here = finished({schema.TAG_DEVICE_NAME: device_name("cpu")}, params)
    for run_id, extra, want in (
        (elsewhere, [], "ran on Elsewhere CPU 9000; this machine's cpu is"),
        (bare, [], "has no configuration to change (params batch_size, precision, image_size"),
        (
            here,
            ["--moves", "fp16"],
            "--moves fp16: fp16 autocast is not supported for training on cpu",
        ),
        ("0123456789abcdef", [], "no run '0123456789abcdef'"),
    ):
        with pytest.raises(UsageError, match=want.replace("(", r"\(")):
            run_whatif(Request(run_id, moves=extra[1:] if extra else [], experiment=EXP))
