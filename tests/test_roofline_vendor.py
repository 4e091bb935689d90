"""roofline.vendor: vendor ceilings per device name, tolerant matching, user overrides."""

from __future__ import annotations

import json
import math

import pytest

from common.errors import UsageError
from roofline import vendor as pt
from roofline.datasheets import BUILTIN
from roofline.vendor import VendorPeaks, find, lookup

# Names exactly as torch.cuda.get_device_name() reports them -> canonical table entry.
TORCH_NAMES = {
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H200": "NVIDIA H200",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA L4": "NVIDIA L4",
    "Tesla T4": "Tesla T4",
    "Tesla V100-SXM2-16GB": "Tesla V100-SXM2-16GB",
    "Tesla V100-SXM2-32GB": "Tesla V100-SXM2-16GB",
    "Tesla V100-PCIE-32GB": "Tesla V100-PCIE-16GB",
    "NVIDIA A10G": "NVIDIA A10G",
    "NVIDIA GeForce RTX 4090": "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 4080 Laptop GPU": "NVIDIA GeForce RTX 4080 Laptop GPU",
    "NVIDIA GeForce RTX 3090": "NVIDIA GeForce RTX 3090",
}


@pytest.fixture(autouse=True)
def _no_env_file(monkeypatch):
    monkeypatch.delenv(pt.PEAKS_FILE_ENV, raising=False)


@pytest.mark.parametrize("torch_name,canonical", TORCH_NAMES.items())
def test_torch_names_resolve(torch_name, canonical):
    assert lookup(torch_name).device_name == canonical


@pytest.mark.parametrize(
    "variant,canonical",
    [
        ("nvidia a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"),  # case
        ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),  # no vendor prefix
        ("A100 SXM 80 GB", "NVIDIA A100-SXM4-80GB"),  # SXM4 -> SXM, "80 GB" -> 80gb
        ("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe"),  # the other spelling torch never uses
        ("NVIDIA A100 PCIe 40GB", "NVIDIA A100-PCIE-40GB"),
        ("H100 SXM5 80GB", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA H100 SXM", "NVIDIA H100 80GB HBM3"),
        ("h100 pcie", "NVIDIA H100 PCIe"),
        ("T4", "Tesla T4"),
        ("NVIDIA T4", "Tesla T4"),
        ("V100-SXM2-32GB", "Tesla V100-SXM2-16GB"),  # memory size that does not change the numbers
        ("V100 SXM 32GB", "Tesla V100-SXM2-16GB"),  # a bare SXM: the generation the entry has
        ("NVIDIA H100 SXM 80GB", "NVIDIA H100 80GB HBM3"),
        ("GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("RTX 4090 24 GB", "NVIDIA GeForce RTX 4090"),
        ("RTX 4080 Laptop", "NVIDIA GeForce RTX 4080 Laptop GPU"),
        ("NVIDIA GeForce RTX 4080 Mobile", "NVIDIA GeForce RTX 4080 Laptop GPU"),
        ("rtx 3090", "NVIDIA GeForce RTX 3090"),
        ("L4", "NVIDIA L4"),
    ],
)
def test_variants_resolve(variant, canonical):
    assert find(variant).device_name == canonical


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4080",  # the desktop card is not the laptop part
        "NVIDIA A100",  # which A100? bandwidth differs by memory and form factor
        "NVIDIA A100 80GB",  # still SXM or PCIe
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a MIG slice has a fraction of the peaks
        "NVIDIA L40",  # not L40S, not L4
        "NVIDIA H100 SXM5 94GB",  # not the 80 GB part: the size-less alias "NVIDIA H100 SXM" must not carry it there
        "H100 SXM 96GB",
        "Tesla V100-SXM3-32GB",  # DGX-2's V100 (higher clocks): not the SXM2 entry
        "NVIDIA A100-SXM3-80GB",  # an SXM generation the entry does not have
        "NVIDIA A100 SXM",  # which memory size? (ambiguous)
        "Intel(R) Xeon(R) Processor",
        "",
    ],
)
def test_unknown_or_ambiguous_names_find_nothing(name):
    assert find(name) is None


def test_unknown_device_message_is_one_actionable_line():
    with pytest.raises(UsageError) as err:
        lookup("NVIDIA GeForce RTX 4080")
    msg = str(err.value)
    assert "\n" not in msg
    assert "NVIDIA GeForce RTX 4080 Laptop GPU" in msg  # a close known device
    assert "--peaks-file" in msg and pt.PEAKS_FILE_ENV in msg  # how to add one


def test_unknown_model_variant_lists_close_devices():
    with pytest.raises(
        UsageError,
        match="no vendor peaks for 'NVIDIA A100': close known devices: "
        "NVIDIA A100-SXM4-80GB.*NVIDIA A100 80GB PCIe",
    ):
        lookup("NVIDIA A100")


def test_ambiguous_name_lists_the_candidates():
    with pytest.raises(UsageError) as err:
        lookup("NVIDIA A100 SXM")  # SXM4 80GB or 40GB: same compute, different bandwidth
    msg = str(err.value)
    assert msg.startswith(
        "no unique vendor peaks for 'NVIDIA A100 SXM': it matches NVIDIA A100-SXM4-80GB, NVIDIA A100-SXM4-40GB;"
    )
    assert "--peaks-file" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name,close",
    [
        ("NVIDIA H100 SXM5 94GB", "NVIDIA H100 80GB HBM3"),
        ("Tesla V100-SXM3-32GB", "Tesla V100-SXM2-16GB"),
    ],
)
def test_other_variants_of_a_known_model_are_unknown_with_a_hint(name, close):
    with pytest.raises(
        UsageError, match=f"no vendor peaks for '{name}': close known devices: {close}"
    ):
        lookup(name)


def test_dense_not_sparse_figures():
    h100 = lookup("NVIDIA H100 80GB HBM3")
    assert h100.flops_per_s["bf16"] == 1979e12 / 2  # datasheet 1,979 TFLOPS is with sparsity
    assert h100.flops_per_s["tf32"] == 989e12 / 2
    assert h100.dram_bytes_per_s == 3.35e12
    a100 = lookup("NVIDIA A100-SXM4-80GB")
    assert a100.flops_per_s["bf16"] == 312e12 and a100.dram_bytes_per_s == 2039e9
    assert lookup("NVIDIA A100-PCIE-40GB").dram_bytes_per_s == 1555e9
    assert lookup("NVIDIA L4").flops_per_s["fp16"] == 121e12
    # GeForce: fp16 with fp32 accumulate (the autocast rate), half the fp16-accumulate figure
    assert lookup("NVIDIA GeForce RTX 4090").flops_per_s["fp16"] == 165.2e12
    assert lookup("NVIDIA GeForce RTX 3090").flops_per_s["bf16"] == 71e12
    laptop = lookup("NVIDIA GeForce RTX 4080 Laptop GPU")
    assert laptop.flops_per_s["fp32"] == pytest.approx(7424 * 2 * 2.28e9)  # 33.85 TFLOP/s
    assert laptop.flops_per_s["fp16"] == pytest.approx(67.75e12)
    assert laptop.dram_bytes_per_s == pytest.approx(432e9)


def test_every_entry_is_complete_and_consistent():
    entries = pt.known_devices()
    assert len({e.device_name for e in entries}) == len(entries)
    for e in entries:
        assert e.source.startswith("https://"), e.device_name
        assert "fp32" in e.flops_per_s and e.dram_bytes_per_s > 0
        for value in e.flops_per_s.values():
            assert math.isfinite(value) and value > 0
        if "tf32" in e.flops_per_s and "fp16" in e.flops_per_s:
            assert e.flops_per_s["tf32"] == pytest.approx(e.flops_per_s["fp16"] / 2, rel=0.02), (
                e.device_name
            )
        assert find(e.device_name) == e  # every entry is found under its own name
    for entry in BUILTIN:  # and under each of its aliases
        for alias in entry.aliases:
            assert find(alias) == entry.peaks, alias


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"device_name": " "}, "device_name"),
        ({"flops_per_s": {}}, "flops_per_s"),
        ({"flops_per_s": {"fp8": 1e15}}, "unknown dtype"),
        ({"flops_per_s": {"fp32": -1.0}}, r"flops_per_s\[fp32\]"),
        ({"flops_per_s": {"fp32": float("nan")}}, r"flops_per_s\[fp32\]"),
        ({"flops_per_s": {"fp32": "fast"}}, r"flops_per_s\[fp32\]"),
        ({"dram_bytes_per_s": 0}, "dram_bytes_per_s"),
        ({"dram_bytes_per_s": True}, "dram_bytes_per_s"),
        ({"source": ""}, "source"),
        ({"l2_bytes_per_s": 0}, "l2_bytes_per_s"),
        ({"l2_bytes_per_s": "fast"}, "l2_bytes_per_s"),
        ({"l1_bytes_per_s": float("inf")}, "l1_bytes_per_s"),
        ({"l1_bytes_per_s": -2e12}, "l1_bytes_per_s"),
    ],
)
def test_vendor_peaks_validation_names_the_field(kwargs, field):
    good = {
        "device_name": "X",
        "flops_per_s": {"fp32": 1e12},
        "dram_bytes_per_s": 1e11,
        "source": "https://x",
    }
    with pytest.raises(ValueError, match=field):
        VendorPeaks(**{**good, **kwargs})


def test_numbers_given_as_strings_are_converted():
    p = VendorPeaks("X", {"bf16": "989.5e12"}, "3.35e12", "https://x", l2_bytes_per_s="5.5e12")
    assert (
        p.flops_per_s == {"bf16": 989.5e12}
        and p.dram_bytes_per_s == 3.35e12
        and p.l2_bytes_per_s == 5.5e12
    )
    assert p.l1_bytes_per_s is None


def test_cache_bandwidths_are_optional_and_not_built_in():
    assert all(e.l2_bytes_per_s is None and e.l1_bytes_per_s is None for e in pt.known_devices())


def test_override_file_adds_cache_bandwidths_and_keeps_them(tmp_path):
    path = _write(
        tmp_path,
        [
            {
                "device_name": "NVIDIA L4",
                "l2_bytes_per_s": 2.0e12,
            },  # the rest from the built-in entry
            {
                "device_name": "My GPU",
                "flops_per_s": {"fp32": 1e13},
                "dram_bytes_per_s": 5e11,
                "source": "https://x",
                "l2_bytes_per_s": "3e12",
                "l1_bytes_per_s": 9e12,
            },
        ],
    )
    l4 = lookup("NVIDIA L4", overrides=path)
    assert (
        l4.l2_bytes_per_s == 2.0e12 and l4.l1_bytes_per_s is None and l4.dram_bytes_per_s == 300e9
    )
    mine = lookup("My GPU", overrides=path)
    assert mine.l2_bytes_per_s == 3e12 and mine.l1_bytes_per_s == 9e12
    table = pt.format_table([l4, mine])
    assert table.splitlines()[0].endswith("| DRAM GB/s | L2 GB/s | L1 GB/s |")
    assert "| NVIDIA L4 | - | 30.3 | 60 | 121 | 121 | 300 | 2000 | - |" in table
    assert "| My GPU | - | 10 | - | - | - | 500 | 3000 | 9000 |" in table


def test_a_roof_takes_the_cache_bandwidths_of_a_vendor_entry():
    from roofline.ceilings import roof_from_vendor

    p = VendorPeaks(
        "X", {"fp32": 1e13}, 5e11, "https://x", l2_bytes_per_s=3e12, l1_bytes_per_s=9e12
    )
    roof = roof_from_vendor(p, "X")
    assert roof.bytes_per_s == {"dram": 5e11, "l2": 3e12, "l1": 9e12}


# ------------------------------------------------------------------------------ user overrides
def _write(tmp_path, data, name="peaks.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_override_file_adds_a_device_and_replaces_one(tmp_path):
    path = _write(
        tmp_path,
        {
            "devices": [
                {
                    "device_name": "NVIDIA RTX 6000 Ada Generation",
                    "aliases": ["RTX 6000 Ada"],
                    "flops_per_s": {"fp32": 91.1e12, "bf16": 364.25e12},
                    "dram_bytes_per_s": 960e9,
                    "source": "https://example.com/rtx6000-ada.pdf",
                },
                # a 115 W laptop: lower clocks; only the changed fields are given
                {
                    "device_name": "NVIDIA GeForce RTX 4080 Laptop GPU",
                    "flops_per_s": {"fp32": 27e12, "fp16": 54e12},
                },
            ]
        },
    )
    new = lookup("RTX 6000 Ada", overrides=path)
    assert (
        new.device_name == "NVIDIA RTX 6000 Ada Generation" and new.flops_per_s["bf16"] == 364.25e12
    )
    laptop = lookup("NVIDIA GeForce RTX 4080 Laptop GPU", overrides=path)
    assert laptop.flops_per_s == {"fp32": 27e12, "fp16": 54e12}
    assert laptop.dram_bytes_per_s == pytest.approx(432e9)  # inherited from the built-in entry
    assert laptop.source == lookup("NVIDIA GeForce RTX 4080 Laptop GPU").source
    assert (
        find("RTX 4080 Mobile", overrides=path) == laptop
    )  # built-in aliases still lead to the override
    assert find("NVIDIA RTX 6000 Ada Generation") is None  # without the file: unknown
    names = [p.device_name for p in pt.known_devices(path)]
    assert names.count("NVIDIA GeForce RTX 4080 Laptop GPU") == 1


def test_environment_variable_names_the_file_and_the_argument_wins(tmp_path, monkeypatch):
    env_file = _write(
        tmp_path, [{"device_name": "NVIDIA L4", "dram_bytes_per_s": 111e9}], "env.json"
    )
    arg_file = _write(
        tmp_path, [{"device_name": "NVIDIA L4", "dram_bytes_per_s": 222e9}], "arg.json"
    )
    monkeypatch.setenv(pt.PEAKS_FILE_ENV, str(env_file))
    assert lookup("NVIDIA L4").dram_bytes_per_s == 111e9
    assert lookup("NVIDIA L4", overrides=arg_file).dram_bytes_per_s == 222e9
    assert lookup("NVIDIA L4").flops_per_s["bf16"] == 121e12  # untouched fields kept


def test_yaml_file_with_numbers_yaml_reads_as_strings(tmp_path):
    path = _write(
        tmp_path,
        "devices:\n"
        "  - device_name: Apple M2 Max\n"
        "    flops_per_s: {fp32: 13.6e12, fp16: 13.6e12}\n"  # YAML 1.1 leaves '13.6e12' a string
        "    dram_bytes_per_s: 400e9\n"
        "    source: https://www.apple.com/macbook-pro/specs/\n",
        "peaks.yaml",
    )
    p = lookup("Apple M2 Max", overrides=path)
    assert p.flops_per_s == {"fp32": 13.6e12, "fp16": 13.6e12} and p.dram_bytes_per_s == 400e9


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid JSON"),
        ({"devices": {"device_name": "X"}}, "expected"),
        ([{"device_name": "X", "dram_bytes_per_sec": 1e9}], "unknown field.*dram_bytes_per_sec"),
        (
            [{"device_name": "Brand New GPU", "flops_per_s": {"fp32": 1e12}}],
            "new device needs dram_bytes_per_s, source",
        ),
        (
            [{"device_name": "NVIDIA L4", "flops_per_s": {"fp32": -5}}],
            r"entry 1 \(NVIDIA L4\).*flops_per_s\[fp32\]",
        ),
        ([{"flops_per_s": {"fp32": 1e12}}], "device_name is required"),
        (
            [{"device_name": "NVIDIA L4", "l2_bytes_per_s": 0}],
            r"entry 1 \(NVIDIA L4\).*l2_bytes_per_s",
        ),
        (
            [{"device_name": "NVIDIA L4", "l2_bytes_per_sec": 1e12}],
            "unknown field.*l2_bytes_per_sec",
        ),
    ],
)
def test_bad_override_file_is_a_one_line_usage_error(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(UsageError, match=message) as err:
        find("NVIDIA L4", overrides=path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_missing_override_file(tmp_path, monkeypatch):
    monkeypatch.setenv(pt.PEAKS_FILE_ENV, str(tmp_path / "nope.json"))
    with pytest.raises(UsageError, match=f"nope.json does not exist.*{pt.PEAKS_FILE_ENV}"):
        find("NVIDIA L4")


def test_table_cli_prints_a_lookup(capsys):
    assert pt.main(["Tesla T4"]) == 0
    out = capsys.readouterr().out
    assert "| Tesla T4 | - | 8.1 | - | 65 | - | 320 |" in out


def test_the_documented_example_file_loads(tmp_path):
    """docs/peaks.md shows the override format; keep that example valid."""
    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "peaks.md").read_text()
    example = doc.split("```json\n", 1)[1].split("```", 1)[0]
    path = _write(tmp_path, example)
    ada = lookup("RTX 6000 Ada", overrides=path)
    assert ada.device_name == "NVIDIA RTX 6000 Ada Generation" and ada.dram_bytes_per_s == 960e9
    laptop = lookup("NVIDIA GeForce RTX 4080 Laptop GPU", overrides=path)
    assert laptop.flops_per_s["fp16"] == 53.5e12 and laptop.dram_bytes_per_s == pytest.approx(432e9)


def test_every_entry_from_ampere_on_has_a_dense_tf32_figure_and_none_before():
    """--precision tf32 meets a TF32 tensor roof (issue 22, item 2): every built-in GPU from Ampere
    on (sm_80+, by its chip) has a tf32 figure below its fp16 one (dense figures: TF32 runs at about
    half the fp16 tensor rate or less); Volta and Turing have none (no TF32 tensor cores)."""
    from profiling.ncu.chips.devices import chip_capability, resolve_chip
    from roofline.datasheets import BUILTIN

    for entry in BUILTIN:
        p = entry.peaks
        cap = chip_capability(resolve_chip(p.device_name).chip)
        assert cap is not None, p.device_name
        if cap >= (8, 0):
            assert 0 < p.flops_per_s["tf32"] < p.flops_per_s["fp16"], p.device_name
        else:
            assert "tf32" not in p.flops_per_s, p.device_name
