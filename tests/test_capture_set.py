"""Capture sets (issue 29): several ncu outputs of one program, merged launch by launch, labelled
by phase, and checked against NERSC's published per-kernel DeepCAM table
(tests/data/ncu/deepcam_v100_o2_adam_bw/, SOURCES.md there)."""

from __future__ import annotations

import gzip
import shutil

import pandas as pd
import pytest

from common.errors import BenchError, UsageError
from profiling.ncu.capture_set import combine, phases_of, read_files
from profiling.ncu.chips.devices import chip_capability, resolve_chip
from profiling.ncu.counting import TIME_FROM_CYCLES, kernel_time, tensor_inst_flops
from profiling.ncu.hierarchy import TableOptions, convention_table, kernels_by_name
from profiling.ncu.parse import read_ncu_csv
from profiling.ncu.summary import summarize
from tests.conftest import NCU_FIXTURES

DEEPCAM = "deepcam_v100_o2_adam_bw"
METRIC_FILES = 12
LAUNCHES = 1426  # IDs 0..1425 in every file (SOURCES.md)


@pytest.fixture(scope="module")
def deepcam():
    """The DeepCAM folder read as one backward-phase set: (files, merged report)."""
    files = read_files([str(NCU_FIXTURES / DEEPCAM)], ["backward"])
    return files, combine(files, DEEPCAM)


@pytest.fixture(scope="module")
def deepcam_table(deepcam):
    _, report = deepcam
    return kernels_by_name(summarize(report, (7, 0)).kernels)


def _authors(ncu_dir) -> pd.DataFrame:
    return pd.read_csv(ncu_dir / DEEPCAM / "authors_table.csv")


# ---------------------------------------------------------------- reading and merging
def test_a_gzipped_file_reads_as_its_text(ncu_dir, tmp_path):
    gz = ncu_dir / DEEPCAM / "out.dram__bytes.sum.gz"
    plain = tmp_path / "out.dram__bytes.sum"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    a, b = read_ncu_csv(gz), read_ncu_csv(plain)
    assert len(a.kernels) == len(b.kernels) == LAUNCHES
    assert [k.metrics for k in a.kernels] == [k.metrics for k in b.kernels]


def test_the_folder_merges_to_one_launch_per_id_not_one_per_process(deepcam):
    files, report = deepcam
    assert len(files) == METRIC_FILES  # authors_table.csv skipped: not ncu output
    assert len({f.report.kernels[0].attrs["Process ID"] for f in files}) == METRIC_FILES
    assert len(report.kernels) == LAUNCHES
    assert {len(k.metrics) for k in report.kernels} == {METRIC_FILES}
    assert {k.phase for k in report.kernels} == {"backward"}


def _copy_two(ncu_dir, tmp_path, edit):
    """Two metric files of the set, the second one's text changed by `edit`."""
    src = ncu_dir / DEEPCAM
    shutil.copy(src / "out.dram__bytes.sum.gz", tmp_path / "a.gz")
    text = gzip.decompress((src / "out.lts__t_bytes.sum.gz").read_bytes()).decode()
    (tmp_path / "b.csv").write_text(edit(text))
    return [str(tmp_path / "a.gz"), str(tmp_path / "b.csv")]


def test_a_kernel_name_that_differs_is_refused_naming_the_file_and_launch(ncu_dir, tmp_path):
    def rename_launch_7(text):
        lines = text.splitlines(keepends=True)
        i = next(n for n, ln in enumerate(lines) if ln.startswith('"7",'))
        cells = lines[i].split('","')
        cells[4] = "renamed_kernel"
        lines[i] = '","'.join(cells)
        return "".join(lines)

    paths = _copy_two(ncu_dir, tmp_path, rename_launch_7)
    with pytest.raises(BenchError) as err:
        combine(read_files(paths, phases_of(paths, ("backward",))), "set")
    assert str(err.value).startswith(
        "b.csv: launch 7 is 'renamed_kernel' where a.gz has 'void at::"
    )


def test_a_file_lacking_a_launch_is_refused_naming_it(ncu_dir, tmp_path):
    def drop_launch_1425(text):
        return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith('"1425",'))

    paths = _copy_two(ncu_dir, tmp_path, drop_launch_1425)
    with pytest.raises(
        BenchError, match=r"^b.csv has no launch 1425 where a.gz has one \(1 launches"
    ):
        combine(read_files(paths, [None, None]), "set")


def test_phases_of_paths():
    assert phases_of(["a", "b"], ()) == [None, None]
    assert phases_of(["a", "b"], ("backward",)) == ["backward", "backward"]
    assert phases_of(["a", "b"], ("forward", "backward")) == ["forward", "backward"]
    with pytest.raises(UsageError, match="--phase gives 3 phases for 2 --import paths"):
        phases_of(["a", "b"], ("forward", "backward", "optimizer"))


def test_kernel_time_from_cycles_where_no_duration():
    assert kernel_time({"gpu__time_duration.sum": 2e-6, "sm__cycles_elapsed.avg": 1.0}) == (
        2e-6,
        "gpu__time_duration.sum",
    )
    cycles = {"sm__cycles_elapsed.avg": 2600.0, "sm__cycles_elapsed.avg.per_second": 1.3e9}
    assert kernel_time(cycles) == (pytest.approx(2e-6), TIME_FROM_CYCLES)
    t, how = kernel_time({"sm__cycles_elapsed.avg": 5.0, "sm__cycles_elapsed.avg.per_second": 0.0})
    assert t != t and how == ""


def test_a_v100_is_volta_with_512_flops_per_tensor_instruction():
    choice = resolve_chip("Tesla V100-SXM2-16GB")
    assert choice.chip == "GV100" and chip_capability(choice.chip) == (7, 0)
    assert tensor_inst_flops((7, 0)) == 512


# ---------------------------------------------------------------- the published table
def test_the_deepcam_import_reproduces_the_authors_table(deepcam_table, ncu_dir):
    """Every row of authors_table.csv: counts exactly, FLOPs and bytes within 0.1 %, time within
    1 % (they divide a name's total cycles by its mean clock), CC FLOPs with each half
    instruction once and GFLOP/s in binary giga, as their table counts."""
    ours = convention_table(deepcam_table, TableOptions("instruction", "binary"))
    theirs = _authors(ncu_dir)
    both = theirs.merge(ours, left_on="Kernel Name", right_on="kernel_name", how="outer")
    assert len(theirs) == len(ours) == len(both) == 71
    assert (both["Count"] == both["count"]).all()
    checks = {
        "CC FLOPs": ("cuda_core_flops", 1e-3),
        "TC FLOPs": ("tensor_flops", 1e-3),
        "all FLOPs": ("flops", 1e-3),
        "dram__bytes.sum": ("dram_bytes", 1e-3),
        "lts__t_bytes.sum": ("l2_bytes", 1e-3),
        "l1tex__t_bytes.sum": ("l1_bytes", 1e-3),
        "AI HBM": ("intensity_dram_flops_per_byte", 1e-3),
        "AI L2": ("intensity_l2_flops_per_byte", 1e-3),
        "AI L1": ("intensity_l1_flops_per_byte", 1e-3),
        "Time": ("time_s", 1e-2),
        "GFLOP/s": ("gflop_per_s_binary", 1e-2),
    }
    for theirs_col, (ours_col, rel) in checks.items():
        assert both[ours_col].fillna(0).tolist() == pytest.approx(
            both[theirs_col].tolist(), rel=rel
        ), theirs_col
    row = both.set_index("Kernel Name").loc[
        "Volta_hmma_implicit_gemm_wgrad_fp32_nhwc_128x128x64x1_1x1x1x0x1"
    ]
    assert row["count"] == 64 and row["cuda_core_flops"] == 216_498_176
    assert row["tensor_flops"] == 636_896_673_792


def test_the_project_convention_counts_half_instructions_twice(deepcam_table):
    """kernels_by_name.csv (the project's convention): CUDA-core FLOPs = the instruction
    convention's plus the fp16 FLOPs once more."""
    once = convention_table(deepcam_table, TableOptions("instruction", "si"))
    lanes = convention_table(deepcam_table, TableOptions("lanes", "si"))
    fp16 = deepcam_table["cuda_core_fp16_flops"].fillna(0)
    assert fp16.sum() > 0  # O2: half-precision elementwise work exists
    assert (lanes["cuda_core_flops"] - once["cuda_core_flops"]).tolist() == pytest.approx(
        (fp16 / 2).tolist()
    )
    assert (lanes["cuda_core_flops"] == deepcam_table["cuda_core_flops"]).all()
    assert lanes["gflop_per_s_si"].tolist() == pytest.approx(
        (deepcam_table["flops_per_s"] / 1e9).tolist(), nan_ok=True
    )
