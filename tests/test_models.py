"""Every model a user can name trains and is counted right: every torchvision classifier, timm
models of five families and a user's own module (train/models.py), each at its smallest training
size, its training FLOPs checked against an independent count (tests/hand_count.py: from the
forward pass alone, by formulas written there).

The count runs on the meta device (shapes only: nothing allocated, so vit_h_14 and
regnet_y_128gf count at all), and the train run's counter on the CPU equals the meta device's
count (tests/test_flops.py). Every one of torchvision's 80 classifiers takes 436 s on 2 shared cores (the
meta device's Python kernels), far over CI's time, so CI counts one model of each family
(`CI_MODELS`, the cheapest, and those the size rules and auxiliary heads concern), the timm models
and the user factory, and checks each against docs/train.md's table. `ROOFLINE_ALL_MODELS=1`
counts every name, in two spawned workers, and checks the whole table;
`ROOFLINE_WRITE_MODEL_TABLE=1 .venv/bin/python -m pytest tests/test_models.py -k family`
counts every name and rewrites the table.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from tests.hand_count import attention_flops, check_model, fvcore_forward, trains_at
from train.models import SIZE_RULES, build_model, classification_models, size_rule

DOC = Path(__file__).resolve().parents[1] / "docs" / "train.md"
BEGIN, END = "<!-- model table: tests/test_models.py -->", "<!-- end of model table -->"
TIMM = [
    "timm:resnet18",
    "timm:convnext_atto",
    "timm:efficientnet_b0",
    "timm:vit_tiny_patch16_224",
    "timm:mixer_s16_224",
]
USER_MODULE = '''
import torch.nn as nn


def make(num_classes=1000, image_size=224):
    """a user's factory: a small CNN whose head is sized from the image size it is given"""
    side = image_size // 4
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * side * side, num_classes),
    )
'''
USER = "anynet_user_nets:make"
CI_MODELS = [
    "alexnet",
    "convnext_tiny",
    "densenet121",
    "efficientnet_b0",
    "googlenet",
    "inception_v3",
    "maxvit_t",
    "mnasnet0_5",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "regnet_y_400mf",
    "resnet18",
    "shufflenet_v2_x0_5",
    "squeezenet1_1",
    "swin_t",
    "vgg11",
    "vit_b_16",
]
"""one torchvision classifier of each family (docs/train.md's table), counted in CI"""
ON_CPU = {
    "densenet121",
    "efficientnet_b0",
    "googlenet",
    "mnasnet0_5",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "regnet_y_400mf",
    "shufflenet_v2_x0_5",
    "timm:convnext_atto",
    "timm:efficientnet_b0",
}
"""CI's models counted on the CPU, 1.5-4x faster than on the meta device for these (its batch norms
and elementwise ops are Python there: googlenet 1.5-1.8 s on the CPU against 2.4-2.7 s on meta,
regnet_y_400mf 0.9 against 2.0-2.7 s, load average 10); not the attention models (the CPU's
flash-attention kernel is no contraction the hand count knows); every name counts on the meta
device (RegNet's with the fallback build, checked there; its memory check's sizing, by the same
build, in tests/test_any_model.py)"""


def smallest(spec: str) -> int:
    return size_rule(spec).minimum


def too_small(spec: str) -> int | None:
    """A size just under what SIZE_RULES allows (None when that is under the 32 px floor)."""
    rule = SIZE_RULES[spec]
    if rule.minimum > 32:
        return rule.minimum - 1
    return rule.minimum + rule.multiple // 2 if rule.multiple > 1 else None


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "anynet_user_nets.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return USER


def every_model() -> bool:
    return bool(
        os.environ.get("ROOFLINE_ALL_MODELS") or os.environ.get("ROOFLINE_WRITE_MODEL_TABLE")
    )


def _sweep(specs: list[str], below: dict[str, int]):
    """check_model of every spec and trains_at of every (spec, too small size): in this process
    for CI's few, in 2 spawned workers for every name."""
    sizes = [smallest(s) for s in specs]
    if not every_model():
        devices = ["cpu" if s in ON_CPU else "meta" for s in specs]
        counted = [check_model(s, z, device=d) for s, z, d in zip(specs, sizes, devices)]
        return counted, {s: trains_at(s, size) for s, size in below.items()}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        counted = list(pool.map(check_model, specs, sizes))
        refused = dict(zip(below, pool.map(trains_at, list(below), list(below.values()))))
    return counted, refused


@pytest.mark.models
def test_every_model_family_trains_and_counts_as_the_hand_count(user_module):
    torchvision = classification_models() if every_model() else CI_MODELS
    specs = torchvision + TIMM + [user_module]
    below = {s: too_small(s) for s in SIZE_RULES if s in specs and too_small(s) is not None}
    counted, trains_below = _sweep(specs, below)
    problems = []
    for r in counted:
        if r["uncounted"] or r["hand_unknown"]:
            problems.append(
                f"{r['spec']}: ops with no formula {r['uncounted'] + r['hand_unknown']}"
            )
        if r["total"] != r["hand_total"] or r["forward"] != r["hand_forward"]:
            problems.append(
                f"{r['spec']} at {r['size']} px: counted {r['total']:.6g} "
                f"(forward {r['forward']:.6g}), by hand {r['hand_total']:.6g} "
                f"(forward {r['hand_forward']:.6g})"
            )
    problems += [f"{s} still trains at {below[s]} px" for s, ok in trains_below.items() if ok]
    assert not problems, "\n".join(problems)
    by_spec = {r["spec"]: r for r in counted}
    if every_model():  # RegNet's constructor reads tensor values: built with the fallback
        assert by_spec["regnet_y_400mf"]["built"].startswith("parameters on the meta device")
    assert by_spec["googlenet"]["aux_heads"] == {"aux_logits1": 0.3, "aux_logits2": 0.3}
    assert by_spec["inception_v3"]["aux_heads"] == {"aux_logits": 0.4}
    # the closed form of the issue for a CNN: 3 x forward - the first convolution's input gradient
    r18 = by_spec["resnet18"]
    first_conv = 2 * 2 * 16 * 16 * 64 * 3 * 7 * 7  # 2 x batch x 16x16 out x 64 x 3 x 7x7
    assert r18["total"] == 3 * r18["forward"] - first_conv
    fvcore_agrees(by_spec)
    if every_model():
        _check_doc(model_table(counted))
    else:
        _check_doc_rows(counted)


def fvcore_agrees(by_spec: dict) -> None:
    """A second independent count of the forward pass, by fvcore (a library: 2 x its count of
    the contractions, tests/hand_count.py), for a plain CNN, a depthwise one and a ViT, whose
    attention fvcore leaves out (`aten::scaled_dot_product_attention`: added here in closed
    form, 5 tokens at 32 px: 4 patches and the class token)."""
    vit = "timm:vit_tiny_patch16_224"  # 12 layers of width 192
    for spec, attention in (
        ("resnet18", 0),
        ("mobilenet_v2", 0),
        (vit, attention_flops(batch=2, tokens=5, dim=192, layers=12)),
    ):
        r = by_spec[spec]
        flops, skipped = fvcore_forward(spec, r["size"])
        assert (flops + attention, r["size"]) == (r["forward"], 32), spec
        assert ("aten::scaled_dot_product_attention" in skipped) == (spec == vit)


def test_inception_v3_below_299_px_is_refused_in_one_line():
    from common.errors import UsageError
    from train.models import check_image_size

    with pytest.raises(UsageError) as err:
        check_image_size("inception_v3", 224)
    assert str(err.value) == (
        "inception_v3 trains at 299 px or more (its auxiliary head, which runs in training, "
        "needs a 17 x 17 input), not 224 px: use --image-size 299"
    )
    with pytest.raises(UsageError, match=r"a multiple of 14 .* use --image-size 56"):
        check_image_size("vit_h_14", 50)
    check_image_size("vit_h_14", 42)  # 3 x 3 patches of 14: allowed
    from train.complexity.config import ComplexityConfig
    from train.complexity.measure import preflight

    with pytest.raises(UsageError, match=r"^inception_v3 trains at 299 px or more"):
        preflight(ComplexityConfig(models=["resnet18", "inception_v3"], device="cpu"))


def test_a_user_factory_gets_the_classes_and_the_image_size(user_module):
    model = build_model(user_module, 7, 64)
    assert model[-1].out_features == 7 and model[-1].in_features == 16 * 16 * 16


def test_bad_model_specs_are_one_line_usage_errors(user_module):
    from common.errors import UsageError
    from train.models import check_model_name

    cases = {
        "resnet19": r"unknown model 'resnet19': did you mean resnet18",
        "timm:resnet19x": r"unknown timm model 'resnet19x': did you mean",
        "no_such_pkg.mod:make": r"cannot import no_such_pkg.mod \(ModuleNotFoundError",
        "anynet_user_nets:nothing": r"anynet_user_nets has no 'nothing'",
        "anynet_user_nets:nn": r"nn is not callable",
    }
    for spec, message in cases.items():
        with pytest.raises(UsageError, match=message):
            check_model_name(spec)
    assert check_model_name("timm:resnet18") == "timm:resnet18"


def test_ci_counts_one_model_of_every_family_and_the_doc_lists_every_name():
    """Cheap (no counting): a torchvision release's new family or name fails here, not silently."""
    names = classification_models()
    assert set(CI_MODELS) <= set(names)
    assert {_family(s) for s in CI_MODELS} == {_family(s) for s in names}
    listed = {m for row in _doc_rows().values() for m in row["models"]}
    assert set(names) <= listed, f"not in docs/train.md's table: {sorted(set(names) - listed)}"


# ------------------------------------------------------------------ docs/train.md's table
def _family(spec: str) -> str:
    if spec.startswith("timm:"):
        return "timm " + re.sub(r"[_\d].*$", "", spec[5:])
    if ":" in spec:
        return "user factory (package.module:callable)"
    import torchvision

    return torchvision.models.get_model_builder(spec).__module__.rsplit(".", 1)[-1]


def _sizes(rows: list[dict]) -> str:
    sizes = sorted({r["size"] for r in rows})
    rules = {size_rule(r["spec"]).multiple for r in rows} - {1}
    text = " / ".join(f"{s}" for s in sizes) + " px"
    return text + (f" (multiples of {', '.join(map(str, sorted(rules)))})" if rules else "")


def _counted(rows: list[dict]) -> str:
    kinds = sorted({k for r in rows for k in r["contractions"]})
    words = {"convolution": "convolutions", "mm": "matmuls", "addmm": "matmuls", "bmm": "attention"}
    text = ", ".join(dict.fromkeys(words.get(k, k) for k in kinds))
    heads = {h: w for r in rows for h, w in r["aux_heads"].items()}
    if heads:
        text += "; aux heads trained (" + ", ".join(f"{w} x {h}" for h, w in heads.items()) + ")"
    return text


def model_table(results: list[dict]) -> str:
    """The markdown table of docs/train.md: one row per family (torchvision's builder module,
    timm's architecture, the user's factory)."""
    families: dict[str, list[dict]] = {}
    for r in results:
        families.setdefault(_family(r["spec"]), []).append(r)
    lines = [
        "| family | models | smallest training size | GFLOP per step there (batch 2) | counted |",
        "|---|---|---|---|---|",
    ]
    for fam, rows in families.items():
        gflop = sorted(r["total"] / 1e9 for r in rows)
        span = f"{gflop[0]:.3g}" + (f" – {gflop[-1]:.3g}" if len(gflop) > 1 else "")
        built = {r["built"] for r in rows} - {"meta"}
        note = " (built with its allocations on meta)" if built else ""
        names = ", ".join(r["spec"] for r in rows)
        lines.append(f"| {fam}{note} | {names} | {_sizes(rows)} | {span} | {_counted(rows)} |")
    return "\n".join(lines)


def _check_doc(table: str) -> None:
    import os

    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    fresh = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    if os.environ.get("ROOFLINE_WRITE_MODEL_TABLE") and BEGIN in text:
        DOC.write_text(fresh)
        return
    assert BEGIN in text and text == fresh, (
        "docs/train.md's model table differs from the models: ROOFLINE_WRITE_MODEL_TABLE=1 "
        ".venv/bin/python -m pytest tests/test_models.py -k family rewrites it"
    )


def _doc_rows() -> dict[str, dict]:
    """docs/train.md's model table: family -> {models, size (its column's text), gflop (the span's
    text)}."""
    table = DOC.read_text().partition(BEGIN)[2].partition(END)[0]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        family, models, size, gflop, _ = (c.strip() for c in line.strip("|").split("|"))
        family = family.split(" (built")[0]
        rows[family] = {"models": models.split(", "), "size": size, "gflop": gflop}
    return rows


def _check_doc_rows(results: list[dict]) -> None:
    """CI's few models against docs/train.md's rows: each is listed in its family's row, at the
    size the row names, with a GFLOP figure inside the row's span."""
    rows, problems = _doc_rows(), []
    for r in results:
        row = rows.get(_family(r["spec"]))
        lo, _, hi = (row or {}).get("gflop", "nan").partition(" – ")
        gflop = float(f"{r['total'] / 1e9:.3g}")
        if (
            row is None
            or r["spec"] not in row["models"]
            or not re.search(rf"\b{r['size']}\b", row["size"])
            or not float(lo) <= gflop <= float(hi or lo)
        ):
            problems.append(f"{r['spec']}: {r['size']} px, {gflop} GFLOP; docs/train.md: {row}")
    assert not problems, "docs/train.md's model table: " + "\n".join(problems)
