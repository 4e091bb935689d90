"""Model complexity: parameter counts, saved activations, optimizer state and the memory model,
against published numbers, hand-computed bytes and a measured training step."""

from __future__ import annotations

import csv
import io

import mlflow
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import schema
from train.complexity.__main__ import main
from train.complexity.__main__ import build_parser, config_from_args
from train.complexity.config import ComplexityConfig, parse_bytes
from train.complexity.markdown import measured_batches_text
from train.complexity.measure import preflight, rss_batches
from train.complexity.tables import MODEL_COLUMNS, RSS_COLUMNS
from train.complexity import footprint as fp
from train.complexity import rss_step as rss
from train.complexity import saved_tensors as st
from train.config import TrainConfig
from train.device import device_memory_bytes
from train.models import build_model

CPU = torch.device("cpu")


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize(
    "name, published",
    [
        ("resnet18", 11_689_512),
        ("resnet50", 25_557_032),
        ("vgg16", 138_357_544),
        ("mobilenet_v2", 3_504_872),
    ],
)
def test_parameter_counts_equal_torchvision_published(name, published):
    with torch.device("meta"):  # shapes only, nothing allocated or initialised
        model = build_model(name, 1000)
    assert next(model.parameters()).device.type == "meta"
    assert fp.count_params(model) == (published, 4 * published)  # fp32


# ------------------------------------------------------------------ saved activations, by hand
def tiny_net(inplace: bool, bn: bool = False) -> nn.Sequential:
    layers = [nn.Conv2d(3, 4, 3, padding=1)]
    if bn:
        layers.append(nn.BatchNorm2d(4))
    layers += [nn.ReLU(inplace=inplace), nn.Conv2d(4, 8, 3, padding=1)]
    return nn.Sequential(*layers)


def saved_bytes(model, run, batch_size: int) -> st.SavedTensors:
    """Run `run()` (a forward or a loss) and record what autograd saved, as footprint does."""
    with st.SavedTensorRecorder(model, batch_size) as rec:
        run()
    return rec.result()


@pytest.mark.parametrize("inplace", [False, True])
def test_conv_relu_conv_saved_bytes_by_hand(inplace):
    # x: 2x3x8x8 fp32 = 1536 B, does not require grad. What autograd keeps for backward:
    #   conv0 (ConvolutionBackward0): its input x (1536 B) and its weight (a parameter: not counted)
    #   relu  (ReluBackward0): its result, 2x4x8x8 fp32 = 2048 B. In place, the result IS conv0's
    #         output storage; not in place, a new storage: 2048 B either way.
    #   conv2: its input = relu's result, the SAME storage (counted once) + its weight (parameter)
    #   .sum() (SumBackward0): only sizes, no tensor
    # A naive per-tensor sum would give 1536 + 432 + 2048 + 2048 + 1152 = 7216 B.
    torch.manual_seed(0)
    net, x = tiny_net(inplace), torch.randn(2, 3, 8, 8)
    saved = saved_bytes(net, lambda: net(x).sum(), batch_size=2)
    assert saved.total_bytes == 1536 + 2048
    assert saved.by_module == {"0": 1536, "1": 2048}  # conv2 saved nothing new
    assert saved.weight_bytes == 4 * (4 * 3 * 9) + 4 * (
        8 * 4 * 9
    )  # conv weights 432 + 1152 B, biases not saved


def test_batch_norm_saves_batch_independent_statistics_and_buffers_are_weights():
    # conv -> bn -> relu_ (in place) -> conv, at batch N:
    #   conv0: x (N*3*64*4 B); bn: its input = conv0 output (N*4*64*4 B) + save_mean, save_invstd
    #   (4 channels x 4 B each = 32 B, independent of N) + weight, running_mean, running_var
    #   (a parameter and two buffers: weights, 48 B); relu_: bn's output (N*4*64*4 B), which conv2
    #   saves again (same storage).
    torch.manual_seed(0)
    net = tiny_net(inplace=True, bn=True)
    totals = {}
    for n in (2, 4):
        x = torch.randn(n, 3, 8, 8)
        saved = saved_bytes(net, lambda: net(x).sum(), batch_size=n)
        assert saved.by_module == {"0": n * 768, "1": n * 1024 + 32, "2": n * 1024}
        assert saved.weight_bytes == 432 + 1152 + 3 * 16
        totals[n] = saved.total_bytes
    slope, fixed = fp._affine(totals)
    assert (slope, fixed) == (768 + 1024 + 1024, 32)


def test_cross_entropy_and_views_of_saved_storages():
    # conv -> relu -> conv -> flatten -> linear -> cross_entropy at batch 2:
    #   conv0 x 1536, relu 2048, linear: flatten VIEW of conv2's output (its storage, 2x8x8x8x4 =
    #   4096 B) + weight.t() (a view of a parameter: not counted); loss: log_softmax result (2x10x4 =
    #   80 B, which nll_loss saves again), the int64 targets (16 B) and nll's total_weight (4 B).
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 8, 3, padding=1),
        nn.Flatten(),
        nn.Linear(512, 10),
    )
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 2])
    saved = saved_bytes(net, lambda: F.cross_entropy(net(x), y), batch_size=2)
    assert saved.by_module == {"0": 1536, "1": 2048, "4": 4096, st.LOSS_ROW: 80 + 16 + 4}
    assert saved.total_bytes == 7780
    assert saved.output_shapes["4"] == (2, 10)


def test_deepspeed_per_module_flops_sum_to_the_total():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 8, 3, padding=1),
        nn.Flatten(),
        nn.Linear(512, 10),
    )
    profile, by_module = fp.forward_profile_by_module(net, torch.randn(2, 3, 8, 8))
    macs0 = 2 * 8 * 8 * 4 * 3 * 9  # N*H*W*Cout*Cin*k*k
    assert by_module["0"] == (
        2 * macs0 + 2 * 8 * 8 * 4,
        macs0,
    )  # DeepSpeed adds one FLOP per bias add
    assert by_module["1"] == (2 * 4 * 8 * 8, 0)  # ReLU: one FLOP per element
    assert by_module["4"] == (2 * 2 * 512 * 10, 2 * 512 * 10)
    assert sum(f for f, _ in by_module.values()) == profile.flops
    assert sum(m for _, m in by_module.values()) == profile.macs


# ------------------------------------------------------------------ gradients and optimizer state
@pytest.mark.parametrize(
    "optimizer, expected",
    [
        (
            "sgd",
            240,
        ),  # momentum: one buffer per parameter (Linear 5->10: 60 fp32 = 240 B) = 1 x parameter bytes
        (
            "adam",
            2 * 240 + 2 * 4,
        ),  # exp_avg + exp_avg_sq = 2 x parameter bytes, plus one fp32 `step` per tensor
        ("adamw", 2 * 240 + 2 * 4),  # the same state; only the update differs
    ],
)
def test_optimizer_state_bytes_measured_after_one_step(optimizer, expected):
    from train.step import make_optimizer

    lin = nn.Linear(5, 10)  # two parameter tensors: weight 10x5, bias 10
    opt = make_optimizer(optimizer, lin.parameters(), 0.01)
    assert fp.optimizer_state_bytes(opt) == 0 and fp.grad_bytes(lin) == 0
    lin(torch.randn(3, 5)).sum().backward()
    opt.step()
    assert fp.grad_bytes(lin) == 240
    assert fp.optimizer_state_bytes(opt) == expected


def test_adam_is_plain_adam_without_weight_decay():
    from train.step import make_optimizer

    opt = make_optimizer("adam", nn.Linear(5, 10).parameters(), 0.01)
    assert type(opt) is torch.optim.Adam and opt.param_groups[0]["weight_decay"] == 0
    assert TrainConfig(optimizer="Adam", env_label="t").optimizer == "adam"
    assert config_from_args(build_parser().parse_args(["--optimizer", "adam"])).optimizer == "adam"


# ------------------------------------------------------------------ the memory model
def test_memory_model_and_largest_fitting_batch_by_hand():
    # fixed = 100 + 100 + 200 + 10 = 410 B; 30 B per sample; 1000 B -> (1000 - 410) // 30 = 19
    assert fp.predicted_train_mem_bytes(100, 100, 200, 10, 30, 19) == 980
    assert fp.max_batch_fit(410, 30, 1000) == 19
    assert fp.max_batch_fit(410, 30, 439) == 0  # not even one sample
    assert fp.max_batch_fit(410, 30, 440) == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16GiB", 16 * 2**30),
        ("16GB", 16 * 10**9),
        ("512MiB", 512 * 2**20),
        ("512 mb", 512 * 10**6),
        ("1.5KiB", 1536),
        ("100", 100),
        ("2e9", 2 * 10**9),
        ("1TiB", 2**40),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["16XB", "GiB", "sixteen", "-1GB", "0", "16 iB", ""])
def test_parse_bytes_rejects_bad_sizes(text):
    with pytest.raises(ValueError, match="size like 16GiB|at least 1 byte"):
        parse_bytes(text)


def test_analysis_matches_count_work_of_a_training_run():
    """The counts are those a training run of the same config logs (measured at 1 and 2 here,
    at 2 and 4 there: every count is affine in the batch, so they agree exactly)."""
    from train.bench import count_work, prepare

    c = fp.analyze_model(
        TrainConfig(model="resnet18", image_size=64, data="synthetic", env_label="t"), CPU
    )
    assert c.measured_batches == (1, 2)
    counts, forward = count_work(
        prepare(
            TrainConfig(
                model="resnet18", image_size=64, batch_size=16, data="synthetic", env_label="t"
            ),
            CPU,
        )
    )
    mine = c.step_counts(16)
    assert mine.train_flops == counts.train_flops and mine.modeled_bytes == counts.modeled_bytes
    assert mine.modeled_intensity_flops_per_byte == counts.modeled_intensity_flops_per_byte
    assert (c.fwd_flops_per_sample, c.fwd_macs_per_sample) == (
        forward.flops_per_sample,
        forward.macs_per_sample,
    )
    assert c.params == forward.params == 11_689_512
    assert (
        c.grad_bytes == c.optimizer_state_bytes == c.param_bytes == 4 * c.params
    )  # SGD momentum: 1 x params
    # the per-layer table adds up to the model's totals
    assert sum(r.saved_bytes_per_sample for r in c.layers) == c.activation_bytes_per_sample
    assert sum(r.saved_fixed_bytes for r in c.layers) == c.activation_fixed_bytes
    assert sum(r.fwd_flops_per_sample for r in c.layers) == pytest.approx(
        c.fwd_flops_per_sample, rel=1e-12
    )
    assert sum(r.params for r in c.layers) == c.params
    conv1 = next(r for r in c.layers if r.name == "conv1")
    assert (
        conv1.output_shape == "64x32x32" and conv1.saved_bytes_per_sample == 3 * 64 * 64 * 4
    )  # saves the image
    assert c.predicted_train_mem_bytes(16) == c.fixed_bytes + 16 * c.activation_bytes_per_sample


def test_batch_norm_on_a_1x1_map_measures_at_2_and_4_and_adam_state_is_twice_the_parameters():
    # resnet18 at 32 px ends in 1x1 maps: batch norm cannot train on one sample there
    c = fp.analyze_model(
        TrainConfig(
            model="resnet18", image_size=32, data="synthetic", env_label="t", optimizer="adam"
        ),
        CPU,
    )
    assert c.measured_batches == (2, 4)
    assert c.activation_bytes_per_sample > 0
    # Adam: exp_avg + exp_avg_sq (2 x 46,758,048 B) + one fp32 `step` per parameter tensor (62 in resnet18)
    assert c.param_bytes == 4 * 11_689_512 and c.grad_bytes == c.param_bytes
    assert c.optimizer_state_bytes == 2 * c.param_bytes + 62 * 4


# ------------------------------------------------------------------ the prediction vs a measured step
# Tolerance, from measurements on this machine (2-core Xeon VM shared with other jobs, torch 2.14.1,
# glibc malloc); error = (predicted - measured growth) / measured growth of one first step:
#   mobilenet_v2 64 px SGD (activations dominate): batch 4 -25.1..-26.7 %, batch 16 -16.6..-27.7 %
#     (6 runs each; the RSS of larger steps varies more);
#   resnet18 32 px (weights dominate: gradients 46.8 MB, activations 0.46 MB per sample): batch 2,
#     SGD -23.9..-24.7 %, Adam -25.8..-25.9 % (5 runs each).
# The prediction is low because RSS also holds what the formula leaves out: ~21 MiB of library
# code paged in by the first backward (RssFile), oneDNN's JIT kernels, transient gradients of
# activations, Adam's temporaries and glibc's cached, fragmented heap. We accept -45 % .. +15 %.
# What it catches, measured with mutants applied to a scratch copy:
#   optimizer_state_bytes = 0: resnet18 b2 SGD -62 %, Adam -75 % (caught with >= 16 points to spare;
#     mobilenet_v2 b4 gives -44.7..-45.8 %, right at the bound, so that case is NOT relied on), and
#     the Adam - SGD difference below becomes 0;
#   activations counted twice: mobilenet_v2 b16 +29..+49 % (caught).
RSS_TOLERANCE = (-0.45, 0.15)


def _rss_check(c, batch: int) -> tuple[float, float]:
    """(predicted, measured) RSS growth of one first training step of `c` at `batch`, in bytes."""
    m = rss.measure_step_rss(c.model, batch, c.image_size, c.optimizer)
    # not ru_maxrss: see train/complexity/rss_step.py
    assert m.peak_source == "VmHWM reset before the step"
    predicted = fp.predicted_step_growth_bytes(c, batch)
    error = (predicted - m.growth_bytes) / m.growth_bytes
    assert RSS_TOLERANCE[0] <= error <= RSS_TOLERANCE[1], (
        c.model,
        c.optimizer,
        batch,
        m,
        predicted,
        error,
    )
    return predicted, m.growth_bytes


def test_memory_prediction_against_rss_of_a_real_step():
    """Activation-dominated: mobilenet_v2 at 64 px saves 6.4 MB per sample against 14 MB of weights."""
    c = fp.analyze_model(
        TrainConfig(model="mobilenet_v2", image_size=64, data="synthetic", env_label="t"), CPU
    )
    for batch in (4, 16):
        _rss_check(c, batch)


def test_optimizer_state_in_the_rss_of_a_real_step():
    """Weights-dominated: resnet18 at 32 px, where gradients and optimizer state are most of the step.

    Besides each prediction being within tolerance, the difference Adam - SGD (one more parameter-
    sized state tensor, 46.8 MB) must show in the measured growth: measured 61.8..63.3 MiB against
    44.6 MiB predicted (5 runs; the rest is Adam's two transient tensors of the size of the largest
    parameter, 2 x 9.4 MB). A prediction without optimizer state predicts a difference of 0.
    """
    pred, meas = {}, {}
    for optimizer in ("sgd", "adam"):
        c = fp.analyze_model(
            TrainConfig(
                model="resnet18",
                image_size=32,
                data="synthetic",
                env_label="t",
                optimizer=optimizer,
            ),
            CPU,
        )
        pred[optimizer], meas[optimizer] = _rss_check(c, 2)
    predicted_extra, measured_extra = pred["adam"] - pred["sgd"], meas["adam"] - meas["sgd"]
    assert predicted_extra == 4 * 11_689_512 + 62 * 4  # exp_avg_sq and the step counters
    assert 0.5 <= predicted_extra / measured_extra <= 1.1, (predicted_extra, measured_extra)


# ------------------------------------------------------------------ config and CLI errors
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"batch_sizes": [16, 0]}, "batch_sizes"),
        ({"batch_sizes": [-4]}, "batch_sizes"),
        ({"rss_batch_sizes": [0]}, "rss_batch_sizes"),
        ({"image_size": 16}, "image_size"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"device_memory": "lots"}, "device_memory"),
        ({"models": []}, "models"),
        ({"precision": "fp8"}, "precision"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        ComplexityConfig(env_label="t", **kwargs)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "resnet81"], "unknown model 'resnet81': did you mean resnet18"),
        (["--batch-sizes", "16", "0"], "--batch-sizes must be positive integers, got 16 0"),
        (["--batch-sizes", "-8"], "--batch-sizes must be positive integers, got -8"),
        (["--batch-sizes", "16 x"], "--batch-sizes takes whole numbers, got 'x'"),
        (["--device-memory", "16QB"], "--device-memory: expected a size like 16GiB"),
        (["--image-size", "abc"], "argument --image-size: invalid int value: 'abc'"),
        (["--validate-rss", "maybe"], "--validate-rss must be auto, true or false, got 'maybe'"),
        (["--env-label", "x" * 243], "is 243 characters long: use at most 100"),
    ],
)
def test_bad_input_gives_one_line_error_and_usage_exit(argv, message, capsys, tracking):
    code = main(["--no-progress", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err
    assert (
        mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    )  # no run was created


def test_bad_model_fails_the_run_mlflow_run_created(tracking, monkeypatch, capsys):
    client = mlflow.tracking.MlflowClient()
    pre = client.create_run("0").info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", pre)
    assert main(["--models", "resnet81", "--no-progress"]) == 2
    run = client.get_run(pre)
    assert run.info.status == "FAILED" and "unknown model 'resnet81'" in run.data.tags["error"]


def _config(*argv) -> ComplexityConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_rss_check_is_on_by_default_on_cpu_only(monkeypatch):
    from types import SimpleNamespace as NS

    from common.errors import UsageError
    from train import device as dev

    cfg = _config()
    assert cfg.validate_rss == "auto"
    assert cfg.rss_check_on(CPU) is True
    assert cfg.rss_check_on(NS(type="cuda")) is False and cfg.rss_check_on(NS(type="mps")) is False
    assert _config("--validate-rss", "false").rss_check_on(CPU) is False  # the way to turn it off
    assert _config("--validate-rss").validate_rss is True  # bare flag = true, as before
    # which models: auto checks the one with the fewest training FLOPs per sample (first of a tie), true all
    models = [
        NS(model="vgg", train_flops_per_sample=9e10),
        NS(model="mobile", train_flops_per_sample=2e9),
        NS(model="mobile2", train_flops_per_sample=2e9),
    ]
    assert [c.model for c in _config().rss_check_models(models, CPU)] == ["mobile"]
    assert [c.model for c in _config("--validate-rss", "true").rss_check_models(models, CPU)] == [
        "vgg",
        "mobile",
        "mobile2",
    ]
    assert _config().rss_check_models(models, NS(type="cuda")) == []
    assert _config("--validate-rss", "false").rss_check_models(models, CPU) == []
    assert (
        _config().params()["validate_rss"] == "auto"
        and _config("--validate-rss", "no").params()["validate_rss"] == "false"
    )
    # off the CPU an explicit true is refused in one line (auto quietly means off there)
    monkeypatch.setattr(dev, "resolve_device", lambda _name: torch.device("cuda"))
    preflight(_config("--device", "cuda", "--models", "resnet18"))
    with pytest.raises(
        UsageError, match="^--validate-rss measures this process's RSS and needs --device cpu"
    ):
        preflight(_config("--device", "cuda", "--models", "resnet18", "--validate-rss", "true"))


def test_rss_batches_replace_sizes_batch_norm_cannot_train_at():
    from types import SimpleNamespace as NS

    assert rss_batches(NS(model="a", measured_batches=(1, 2), image_size=64), [1, 2]) == (
        [1, 2],
        [],
    )
    bn = NS(
        model="mnasnet0_5", measured_batches=(2, 4), image_size=32
    )  # analyze_model fell back to 2 and 4
    assert rss_batches(bn, [1, 2]) == (
        [2, 4],
        [
            "mnasnet0_5 batch 1 checked at batch 4 instead: its batch norm cannot train on 1 sample(s) at 32 px "
            "(a 1x1 feature map)"
        ],
    )
    assert rss_batches(bn, [1, 8])[0] == [2, 8]
    assert rss_batches(bn, [2, 8]) == ([2, 8], [])


def test_rss_check_that_cannot_run_keeps_the_analysis(tracking, monkeypatch, capsys):
    # The audit's case: mnasnet0_5 at 32 px has a 1x1 map before a batch norm, so batch 1 cannot train
    # ("Expected more than 1 value per channel") and used to throw the finished analysis away. Batch 1
    # is now checked at 4 instead (a real probe); a probe that fails anyway (batch 2, simulated)
    # becomes a note. The default device memory is psutil's available RAM (200 MB here).
    from types import SimpleNamespace as NS

    import psutil

    from common.errors import BenchError

    real_probe = rss.measure_step_rss

    def probe(model, batch_size, *args, **kwargs):
        if batch_size == 2:
            raise BenchError("RSS probe of mnasnet0_5 at batch 2 failed: MemoryError")
        return real_probe(model, batch_size, *args, **kwargs)

    monkeypatch.setattr(rss, "measure_step_rss", probe)
    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: NS(available=200_000_000, total=400_000_000)
    )
    code = main(
        [
            "--models",
            "mnasnet0_5",
            "--image-size",
            "32",
            "--batch-sizes",
            "2",
            "8",
            "--rss-batch-sizes",
            "1",
            "2",
            "--validate-rss",
            "--device",
            "cpu",
            "--experiment",
            "cx",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    notes = [
        "mnasnet0_5 batch 1 checked at batch 4 instead: its batch norm cannot train on 1 sample(s) at 32 px (a 1x1 feature map)",
        "mnasnet0_5 batch 2 not checked: RSS probe of mnasnet0_5 at batch 2 failed: MemoryError",
    ]
    assert "RSS check notes:\n" + "".join(f"- {n}\n" for n in notes) in out
    assert (
        "| mnasnet0_5 | 4 |" in out
        and "| mnasnet0_5 | 2 |" not in out
        and "RSS check (CPU, every model)" in out
    )

    (run,) = mlflow.search_runs(experiment_names=["cx"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.tags["rss_notes"] == "; ".join(notes)
    p, m = run.data.params, run.data.metrics
    assert (
        p["validate_rss"] == "true"
        and p["rss_models"] == "mnasnet0_5"
        and p["rss_batch_sizes"] == "1,2"
    )
    assert (
        p["device_memory_bytes"] == "200000000"
        and p["device_memory_source"] == "available RAM (psutil) at start"
    )
    assert m["device_memory_bytes"] == 200_000_000
    assert (
        m["mnasnet0_5/params"] == 2_218_512
    )  # torchvision's published count: the analysis was kept
    assert not [k for k in m if "/rss_b1/" in k or "/rss_b2/" in k]
    weights = m["mnasnet0_5/param_bytes"] + m["mnasnet0_5/buffer_bytes"]
    predicted = (
        m["mnasnet0_5/fixed_bytes"] - weights + 4 * m["mnasnet0_5/activation_bytes_per_sample"]
    )
    assert m["mnasnet0_5/rss_b4/predicted_growth_bytes"] == pytest.approx(predicted)
    measured = m["mnasnet0_5/rss_b4/measured_growth_bytes"]
    assert measured > m["mnasnet0_5/grad_bytes"]  # a real step: it holds at least the gradients
    assert m["mnasnet0_5/rss_b4/rel_error"] == pytest.approx((predicted - measured) / measured)
    rows = list(
        csv.DictReader(
            io.StringIO(
                mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/complexity/rss_validation.csv")
            )
        )
    )
    assert [(r["model"], r["batch_size"]) for r in rows] == [("mnasnet0_5", "4")]
    assert "RSS check notes:" in mlflow.artifacts.load_text(
        f"runs:/{run.info.run_id}/complexity/summary.md"
    )


def test_lists_accept_spaces_commas_and_one_quoted_string():
    args = build_parser().parse_args(
        ["--models", "resnet18,vgg16", "mobilenet_v2", "--batch-sizes", "64 16", "32"]
    )
    cfg = config_from_args(args)
    assert cfg.models == ["resnet18", "vgg16", "mobilenet_v2"] and cfg.batch_sizes == [16, 32, 64]


def test_header_names_the_measured_batches_per_group():
    from types import SimpleNamespace as NS

    models = [
        NS(model="a", measured_batches=(1, 2)),
        NS(model="b", measured_batches=(1, 2)),
        NS(model="c", measured_batches=(2, 4)),
    ]
    assert measured_batches_text(models) == "1 and 2 (2 and 4 for c)"
    assert measured_batches_text(models[:2]) == "1 and 2"


# ------------------------------------------------------------------ the logged run
# resnet18 at 32 px, fp32, SGD, by hand (4 B per float):
#   weights: 11,689,512 parameters = 46,758,048 B; buffers: running mean and var of 20 batch norms over
#     4,800 channels (64 + 4x64 + 5x128 + 5x256 + 5x512) = 38,400 B, plus 20 int64 counters = 38,560 B;
#   gradients = momentum = 46,758,048 B each;
#   saved for backward, per sample (maps 64x16x16 after conv1, 64x8x8, 128x4x4, 256x2x2, 512x1x1):
#     the image 12,288 + bn1 input 65,536 + relu output 65,536 + maxpool int64 indices 32,768
#     + layer1.0: conv1 input 16,384, bn1 16,384, relu 2 x 16,384, bn2 16,384 = 81,920; layer1.1 65,536
#     + layer2: 5 x 8,192 + 4 x 8,192 (the first block's downsample bn) = 73,728
#     + layer3: 9 x 4,096 = 36,864 + layer4: 9 x 2,048 = 18,432
#     + fc input 2,048 + log_softmax output 4,000 and the int64 target 8 = 458,664 B per sample;
#   once per step: batch mean and inverse std of every batch norm, 2 x 4,800 x 4 = 38,400 B, and the
#     loss's total_weight 4 B = 38,404 B.
R18_32PX_FIXED = 3 * 46_758_048 + 38_560 + 38_404  # = 140,351,108 B
R18_32PX_PER_SAMPLE = 458_664


def test_complexity_run_logs_metrics_tables_and_tags(tracking, capsys, tmp_path):
    # 142 MB: batch 2 fits (141,268,436 B), batch 8 does not (144,020,420 B);
    # max_batch_fit = (142,000,000 - 140,351,108) // 458,664 = 3. The RSS check is on by default (CPU).
    code = main(
        [
            "--models",
            "resnet18",
            "--batch-sizes",
            "2",
            "8",
            "--image-size",
            "32",
            "--device",
            "cpu",
            "--device-memory",
            "142MB",
            "--experiment",
            "cx",
            "--env-label",
            "laptop",
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "| resnet18 | 11.69 |" in out and "measured at batch 2 and 4" in out
    assert "| 0.13 | 0.13 over | 3 |" in out  # b2, b8 in GiB (b8 over 142 MB), max batch 3
    assert "RSS check (CPU, auto: resnet18 only, " in out
    assert "| resnet18 | 2 | " in out and "| resnet18 | 8 | " in out  # the RSS check table
    assert out.strip().splitlines()[-2].startswith("measured 1 model(s) in ")

    (run,) = mlflow.search_runs(experiment_names=["cx"], output_format="list")
    client = mlflow.tracking.MlflowClient()
    assert run.info.status == "FINISHED"
    assert run.data.tags["run_kind"] == "complexity" and run.data.tags["env_label"] == "laptop"
    assert run.data.tags["device_name"] and "rss_notes" not in run.data.tags
    assert (
        run.data.params["device_memory_bytes"] == "142000000"
        and run.data.params["validate_rss"] == "auto"
    )
    assert run.data.params["rss_models"] == "resnet18"
    assert run.info.run_name == "complexity-resnet18-32px-cpu"
    note = run.data.tags[schema.TAG_NOTE].splitlines()
    assert note[0] == out.strip().splitlines()[-2].rsplit("; run ", 1)[0]  # the summary line
    assert note[2].startswith("Covered: models resnet18; batch sizes 2, 8; 32px")
    assert run.data.params["device_memory_source"] == "--device-memory 142MB"
    m = run.data.metrics
    assert m["resnet18/params"] == 11_689_512
    assert m["resnet18/grad_bytes"] == m["resnet18/optimizer_state_bytes"] == 4 * 11_689_512
    assert m["resnet18/buffer_bytes"] == 38_560
    assert m["resnet18/activation_bytes_per_sample"] == R18_32PX_PER_SAMPLE
    assert m["resnet18/activation_fixed_bytes"] == 38_404
    assert m["resnet18/fixed_bytes"] == R18_32PX_FIXED
    assert m["resnet18/b2/predicted_train_mem_bytes"] == 141_268_436
    assert m["resnet18/b8/predicted_train_mem_bytes"] == 144_020_420
    assert m["resnet18/max_batch_fit"] == 3
    assert m["resnet18/b2/train_flops_per_step"] == pytest.approx(
        2 * m["resnet18/train_flops_per_sample"]
    )
    # the RSS check: predicted growth = gradients + momentum + activations (the weights exist before)
    rss = list(
        csv.DictReader(
            io.StringIO(
                mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/complexity/rss_validation.csv")
            )
        )
    )
    assert tuple(rss[0]) == RSS_COLUMNS and [int(r["batch_size"]) for r in rss] == [2, 8]
    for r, predicted in zip(rss, (94_471_828, 97_223_812)):  # 2 x 46,758,048 + 38,404 + b x 458,664
        b = r["batch_size"]
        measured = float(r["peak_rss_bytes"]) - float(r["rss_before_bytes"])
        assert (
            float(r["measured_growth_bytes"])
            == measured
            == m[f"resnet18/rss_b{b}/measured_growth_bytes"]
        )
        assert (
            float(r["predicted_growth_bytes"])
            == predicted
            == m[f"resnet18/rss_b{b}/predicted_growth_bytes"]
        )
        assert float(r["rel_error"]) == pytest.approx((predicted - measured) / measured)
        assert m[f"resnet18/rss_b{b}/rel_error"] == pytest.approx((predicted - measured) / measured)
        assert r["peak_source"] == "VmHWM reset before the step"

    paths = {f.path for f in client.list_artifacts(run.info.run_id, "complexity")}
    assert {
        "complexity/models.csv",
        "complexity/batches.csv",
        "complexity/summary.md",
        "complexity/layers",
        "complexity/rss_validation.csv",
    } <= paths
    models_csv = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/complexity/models.csv")
    (row,) = list(csv.DictReader(io.StringIO(models_csv)))
    assert tuple(row) == MODEL_COLUMNS
    assert int(row["params"]) == 11_689_512 and int(row["max_batch_fit"]) == 3
    assert int(row["device_memory_bytes"]) == 142_000_000 and row["measured_batches"] == "2 4"
    layers = list(
        csv.DictReader(
            io.StringIO(
                mlflow.artifacts.load_text(
                    f"runs:/{run.info.run_id}/complexity/layers/resnet18.csv"
                )
            )
        )
    )
    assert sum(int(r["params"]) for r in layers) == 11_689_512
    assert (
        next(r for r in layers if r["name"] == "maxpool")["saved_bytes_per_sample"] == "32768"
    )  # int64 indices
    assert (
        tmp_path / "out" / "models.csv"
    ).read_text() == models_csv  # --out writes the same tables
    assert (tmp_path / "out" / "rss_validation.csv").exists()
    batches = list(csv.DictReader((tmp_path / "out" / "batches.csv").open()))
    assert [(int(r["batch_size"]), r["fits"]) for r in batches] == [(2, "true"), (8, "false")]
    assert [int(r["predicted_train_mem_bytes"]) for r in batches] == [141_268_436, 144_020_420]


def test_default_device_memory(monkeypatch):
    """Without --device-memory: CUDA's total memory, MPS's recommended working set, CPU's available RAM."""
    from types import SimpleNamespace as NS

    import psutil

    mem, source = device_memory_bytes(CPU)
    assert 0 < mem <= psutil.virtual_memory().total and source == "available RAM (psutil) at start"
    monkeypatch.setattr(psutil, "virtual_memory", lambda: NS(available=123_456_789, total=2**34))
    assert device_memory_bytes(CPU) == (123_456_789, "available RAM (psutil) at start")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: NS(total_memory=24 * 2**30))
    assert device_memory_bytes(torch.device("cuda", 0)) == (24 * 2**30, "CUDA total memory")
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 10**10)
    assert device_memory_bytes(torch.device("mps")) == (
        10**10,
        "MPS recommended max working set",
    )
