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
from profiling.hierarchy.table import TableOptions, convention_table, kernels_by_name, phase_levels
from profiling.ncu.parse import read_ncu_csv
from profiling.ncu.totals import summarize
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
        BenchError,
        match=r"^b.csv holds 1,425 launches where a.gz holds 1,426: launch 1425 is missing from "
        r"it \(1 launches differ\)",
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


# ---------------------------------------------------------------- the profile run
NERSC_V100 = {
    "devices": [
        {
            "device_name": "Tesla V100-SXM2-16GB",
            "flops_per_s": {"fp32": 14.0 * 1024**4, "fp16": 96.9 * 1024**4},
            "dram_bytes_per_s": 828.76 * 1024**3,
            "l2_bytes_per_s": 2996.77 * 1024**3,
            "l1_bytes_per_s": 54000 * 1024**3,
            "source": "NERSC's measured V100 ceilings (SOURCES.md), binary giga made SI",
        }
    ]
}


def _artifact(run_id: str, path: str, tmp_path):
    import mlflow

    return mlflow.tracking.MlflowClient().download_artifacts(run_id, path, str(tmp_path / "dl"))


def test_the_deepcam_set_imports_as_one_backward_profile_of_a_named_workload(
    tracking, ncu_dir, tmp_path, capsys
):
    import json

    import mlflow

    from profiling import cli

    peaks = tmp_path / "v100.json"
    peaks.write_text(json.dumps(NERSC_V100))
    argv = ["--import", str(ncu_dir / DEEPCAM), "--workload", "deepcam", "--phase", "backward"]
    argv += ["--device-name", "Tesla V100-SXM2-16GB", "--batch", "2", "--precision", "fp16"]
    argv += ["--optimizer", "adam", "--half-convention", "instruction", "--units-convention"]
    argv += ["binary", "--peaks-file", str(peaks), "--env-label", "cori", "--experiment", "prof"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "count check skipped: --workload deepcam is not a torchvision model" in err
    assert f"kernel time from {TIME_FROM_CYCLES} of each launch" in err
    (run,) = mlflow.search_runs(experiment_names=["prof"], output_format="list")
    tags, params, m = run.data.tags, run.data.params, run.data.metrics
    assert params["model"] == "deepcam" and params["workload"] == "deepcam"
    assert params["ncu_phase"] == "backward"
    assert tags["ncu_count_check"].startswith(
        "not checked: --workload deepcam is not a torchvision"
    )
    assert tags["cuda_capability"] == "7.0" and tags["ncu_chip"] == "GV100"
    assert tags["ncu_source_time_s"] == TIME_FROM_CYCLES
    assert tags["ncu_source_flops_tensor"] == "sm__inst_executed_pipe_tensor_x512"
    assert m["ncu_kernels"] == LAUNCHES and m["ncu_phase_backward_kernels"] == LAUNCHES
    table = pd.read_csv(_artifact(run.info.run_id, "ncu/kernels_by_name.csv", tmp_path))
    need = ["kernel_name", "count", "time_s", "cuda_core_flops", "tensor_flops", "dram_bytes"]
    assert set(need + ["l2_bytes", "l1_bytes", "bound"]) <= set(table.columns)
    assert len(table) == 71 and table["count"].sum() == LAUNCHES
    assert table["tensor_flops"].sum() == m["ncu_flops_tensor"]
    assert table["dram_bytes"].sum() == m["ncu_dram_bytes"]
    asked = "ncu/kernels_by_name_half-instruction_giga-binary.csv"
    theirs = _authors(ncu_dir).set_index("Kernel Name")
    ours = pd.read_csv(_artifact(run.info.run_id, asked, tmp_path)).set_index("kernel_name")
    assert ours.loc[theirs.index, "cuda_core_flops"].tolist() == theirs["CC FLOPs"].tolist()
    assert ours.loc[theirs.index, "gflop_per_s_binary"].fillna(0).tolist() == pytest.approx(
        theirs["GFLOP/s"].tolist(), rel=1e-2
    )
    png = _artifact(run.info.run_id, "ncu/hierarchical_roofline.png", tmp_path)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    levels = pd.read_csv(_artifact(run.info.run_id, "ncu/phase_levels.csv", tmp_path))
    assert levels["phase"].tolist() == ["backward"]
    assert levels["intensity_dram_flops_per_byte"][0] == pytest.approx(
        m["ncu_intensity_dram_flops_per_byte"]
    )
    assert (
        "Hierarchy (time-weighted intensity, FLOP/byte): backward: DRAM"
        in tags["mlflow.note.content"]
    )
    _the_analysis_report_shows_it(run, tmp_path)


def _the_analysis_report_shows_it(profile, tmp_path) -> None:
    """`python -m analysis` (with one train run of the experiment, which it needs) draws the
    profile's hierarchical roofline under the V100's vendor ceilings and lists its kernels."""
    from analysis import app
    from tests.test_analysis_end_to_end import log_train

    log_train("cori", "Tesla V100-SXM2-16GB", 2, "fp16", thr=20.0, thr_sd=0.1, flops_step=1e12,
              median_s=0.1, intensity=50.0, exp="prof")  # fmt: skip
    out = tmp_path / "out"
    cfg = app.config_from_args(
        app.build_parser().parse_args(["--no-track", "--out", str(out), "--experiment", "prof"])
    )
    app.run(cfg)
    text = (out / "report.md").read_text()
    assert "## Hierarchical roofline (profile runs)" in text
    png = out / "figures" / f"hierarchical_{profile.info.run_id[:12]}.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"profile run `{profile.info.run_id[:8]}`" in text
    assert "| void dgrad2d_grouped_direct_kernel" in text
    assert "time-weighted AI DRAM" in text


# ---------------------------------------------------------------- one file of all metrics, phases
L4_CSV = "l4_resnet18_bs64_train_step_details_nvtx.csv"


def test_the_l4_file_gives_todays_dram_totals_and_no_l2_or_l1_it_did_not_measure(ncu_dir):
    """SOURCES.md: 98 kernels, DRAM read + write = 7.099e8 bytes, 4.928e9 fp32 FLOPs. The file
    holds no lts__t_bytes or l1tex__t_bytes (its capture did not ask for them): those levels are
    absent (NaN), never zero."""
    (f,) = read_files([str(ncu_dir / L4_CSV)], [None])
    summary = summarize(f.report)
    table = kernels_by_name(summary.kernels)
    assert len(summary.kernels) == 98 == table["count"].sum()
    assert table["dram_bytes"].sum() == pytest.approx(7.099e8, rel=1e-3)
    assert table["dram_bytes"].sum() == summary.totals["dram_bytes"]
    assert table["flops"].sum() == pytest.approx(4.928e9, rel=1e-3)
    for level in ("l2", "l1"):
        assert table[f"{level}_bytes"].isna().all() and f"{level}_bytes" not in summary.totals
    levels = phase_levels(table).set_index("phase")
    assert levels.loc["step", "flops"] == pytest.approx(4.928e9, rel=1e-3)  # its NVTX phases summed
    assert levels["time_weighted_intensity_dram_flops_per_byte"].notna().any()
    assert levels["time_weighted_intensity_l2_flops_per_byte"].isna().all()


def _split_by_id(source, folder, bounds) -> list[str]:
    """The details-page file `source` cut at launch IDs `bounds` into files whose IDs start at 0
    (as separate captures number them), without their NVTX columns' phases."""
    import csv

    text = source.read_text().splitlines()
    rows = list(csv.reader(text))
    header, body = rows[0], rows[1:]
    paths = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        path = folder / f"part{i}.csv"
        with path.open("w", newline="") as fh:
            out = csv.writer(fh, quoting=csv.QUOTE_ALL)
            out.writerow(header)
            for r in body:
                if lo <= int(r[0]) < hi:
                    out.writerow([str(int(r[0]) - lo), *r[1:4], "", "", *r[6:]])
        paths.append(str(path))
    return paths


def test_three_phases_captured_apart_add_up_to_a_step(ncu_dir, tmp_path):
    paths = _split_by_id(ncu_dir / L4_CSV, tmp_path, [0, 40, 70, 98])
    phases = ("forward", "backward", "optimizer")
    alone = [summarize(combine(read_files([p], [ph]), p)) for p, ph in zip(paths, phases)]
    step = summarize(combine(read_files(paths, phases_of(paths, phases)), "set"))
    assert len(step.kernels) == 98  # launch IDs restart per file: no launch merged across phases
    assert [s.phases.index.tolist() for s in alone] == [[ph] for ph in phases]
    for q in ("flops_total", "time_s", "dram_bytes"):
        assert step.totals[q] == pytest.approx(sum(s.totals[q] for s in alone), rel=1e-12)
    assert list(step.phases.index) == list(phases)
    for s, ph in zip(alone, phases):
        assert step.phases.loc[ph, "flops_total"] == pytest.approx(s.totals["flops_total"])
        assert step.phases.loc[ph, "time_s"] == pytest.approx(s.totals["time_s"])
    levels = phase_levels(kernels_by_name(step.kernels)).set_index("phase")
    assert list(levels.index) == [*phases, "step"]
    for col in ("flops", "time_s", "dram_bytes", "launches"):
        assert levels.loc["step", col] == pytest.approx(levels.loc[list(phases), col].sum())


# ---------------------------------------------------------------- half precision
def test_no_chip_of_nvidias_metric_database_tells_packed_from_scalar_half_instructions():
    """Why half FLOPs follow a convention (docs/profiling.md, "Half precision"): on every chip of
    the database, the only per-op half counters are hadd, hmul and hfma, one raw counter each
    (HADD2/HMUL2/HFMA2 and their scalar forms together), unlike GB100's fp32 ffma2, which has a
    raw counter of its own. A database that splits them makes this test fail: count exactly then."""
    import re

    from profiling.ncu import nvperf

    db = nvperf.open_database()
    if db is None:
        pytest.skip(f"NVIDIA's metric database does not load here: {nvperf.load_error()}")
    half = re.compile(r"^(sm|smsp)__sass_thread_inst_executed_op_h[a-z0-9]*_pred_on$")
    for chip in db.chips:
        with db.chip(chip) as c:
            ops = {n.split("_op_")[1] for n in c.base_names("counter") if half.match(n)}
            assert ops == {"hadd_pred_on", "hmul_pred_on", "hfma_pred_on"}, chip
            deps = [c.raw_dependencies(f"sm__sass_thread_inst_executed_op_{op}.sum") for op in ops]
            assert all(len(d) == 1 for d in deps), chip
    with db.chip("GB100") as c:
        ffma, ffma2 = (
            c.raw_dependencies(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum")
            for op in ("ffma", "ffma2")
        )
        assert len(ffma2) == 1 and set(ffma2).isdisjoint(ffma)


def test_a_metric_in_two_files_keeps_the_first_value_and_says_so(ncu_dir, tmp_path, capsys):
    """A file that adds a counter (L2 bytes) and repeats one with another value (DRAM bytes of
    launch 3, doubled): the first file's value is kept, with a note. (A file that adds no
    counter and differs is refused: tests/test_hostile_imports.py.)"""

    def double_launch_3(text):
        lines = text.splitlines(keepends=True)
        i = next(n for n, ln in enumerate(lines) if ln.startswith('"3",'))
        cells = lines[i].rstrip("\r\n").split('","')
        cells[-1] = str(2 * int(cells[-1].rstrip('"'))) + '"'
        lines[i] = '","'.join(cells) + "\n"
        return "".join(lines)

    src = ncu_dir / DEEPCAM / "out.dram__bytes.sum.gz"
    shutil.copy(src, tmp_path / "a.gz")
    text = gzip.decompress(src.read_bytes()).decode()
    l2 = gzip.decompress((ncu_dir / DEEPCAM / "out.lts__t_bytes.sum.gz").read_bytes()).decode()
    rows = l2[l2.index('"ID",') :].split("\n", 1)[1].replace('","42680","', '","40338","')
    (tmp_path / "b.csv").write_text(double_launch_3(text) + rows)  # one process: its PID
    paths = [str(tmp_path / "a.gz"), str(tmp_path / "b.csv")]
    report = combine(read_files(paths, [None, None]), "set")
    first = read_ncu_csv(src).kernels[3].metrics["dram__bytes.sum"]
    assert report.kernels[3].metrics["dram__bytes.sum"] == first
    assert "lts__t_bytes.sum" in report.kernels[3].metrics
    assert "note: 1 launches of the set have another dram__bytes.sum in a later file: kept the " \
        "value of a.gz" in capsys.readouterr().err  # fmt: skip


def test_a_cut_gzip_file_is_one_line_naming_it(ncu_dir, tmp_path):
    data = (ncu_dir / DEEPCAM / "out.dram__bytes.sum.gz").read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        BenchError, match=r"^cannot read cut.gz: a damaged or cut gzip file .*copy it again$"
    ):
        read_ncu_csv(cut)


def test_each_launch_has_its_intensity_at_every_level(deepcam, deepcam_table):
    """kernels.csv (one row per launch) carries the three intensities too: a name launched once
    has its launch's."""
    kernels = summarize(deepcam[1], (7, 0)).kernels
    once = deepcam_table[deepcam_table["count"] == 1].iloc[0]
    launch = kernels[kernels["kernel"] == once["kernel_name"]].iloc[0]
    for level in ("dram", "l2", "l1"):
        col = f"intensity_{level}_flops_per_byte"
        assert launch[col] == pytest.approx(once[col]) and launch[col] > 0


def test_raw_pages_split_by_metric_merge_back(ncu_dir, tmp_path):
    """The raw page (header, units row, a row per kernel) cut into two files of different metric
    columns, as one ncu process per metric group would write them: merged, each launch has the
    metrics of both, as in the whole file."""
    import csv

    src = ncu_dir / "b200_decode_raw_page.csv"
    rows = [r for r in csv.reader(src.read_text().splitlines()) if r and not r[0].startswith("==")]
    ident = rows[0].index("CC") + 1  # identity columns end with CC
    half = ident + (len(rows[0]) - ident) // 2
    paths = []
    for i, cols in enumerate((range(ident, half), range(half, len(rows[0])))):
        path = tmp_path / f"part{i}.csv"
        with path.open("w", newline="") as fh:
            csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(
                [r[:ident] + [r[c] for c in cols] for r in rows]
            )
        paths.append(str(path))
    merged = combine(read_files(paths, [None, None]), "set")
    whole = read_files([str(src)], [None])[0].report
    assert merged.page == "raw" and len(merged.kernels) == len(whole.kernels) > 1
    assert [k.metrics for k in merged.kernels] == [k.metrics for k in whole.kernels]


def test_a_kernel_above_its_roof_is_named_with_why(deepcam_table):
    """Item 3: a profile's kernel whose FLOP/s exceed the ceiling that bounds it is marked in the
    report's kernel table and named in one sentence (ncu's replayed, clock-locked times only slow
    a kernel: the ceiling is too low), as a train point above its roof is."""
    from analysis.hierarchy import above_roof, kernels_table
    from profiling.hierarchy.table import add_bounds
    from roofline.model import Roof

    table = deepcam_table
    rates = (table["flops"] / table["time_s"]).dropna()
    low = Roof(
        "V100", {"fp32": float(rates.median()), "fp16": float(rates.median())}, {"dram": 1e15}
    )
    bounded = add_bounds(table, low)
    over = bounded[bounded["roof_fraction"] > 1]
    assert len(over) > 0 and (bounded["roof_fraction"].dropna() <= 1).any()
    text = above_roof(bounded)
    assert text.startswith(f"Above the roof: {len(over)} kernel name(s) exceed the ceiling")
    assert "The ceiling looks too low: ncu times each kernel at locked clocks" in text
    cells = [row[-1] for row in kernels_table(bounded, top=len(bounded)).rows]
    assert sum("above its roof (" in c for c in cells) == len(over)
    high = Roof("V100", {"fp32": 1e18, "fp16": 1e18}, {"dram": 1e18, "l2": 1e18, "l1": 1e18})
    assert above_roof(add_bounds(table, high)) == ""
