"""Imports that are not measurements (issue 25): profiling/ncu/checks.py and the bounded reader.

Each edits one line of the real L4 fixture (98 kernels, 6.94 FLOP/byte) the way a damaged or
hand-made file would. On main every one of them imported FINISHED: `furlong` read as bytes
(intensity 48.1), negative DRAM bytes and kernel time, `inf` and 1e300 FLOPs (intensity 2.8e291);
a header followed by NUL bytes ended in `_csv.Error: field larger than field limit (131072)`.
"""

from __future__ import annotations

import mlflow
import pytest

from profiling import cli
from profiling.ncu.names import is_relevant
from profiling.ncu.parse import NcuParseError, read_ncu_csv

L4_CSV = "l4_resnet18_bs64_train_step_details_nvtx.csv"
CONFIG = ["--model", "resnet18", "--batch", "64", "--image-size", "32", "--experiment", "prof"]
KERNEL0 = "kernel 0 (void implicit_convolve_sgemm<float, float, (int)128, (int)5, (int)5, (int)3"
DRAM_READ0 = '"dram__bytes_read.sum","Mbyte","1.08"'
TIME0 = '"gpu__time_duration.sum","usecond","96.99"'
FFMA0 = '"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum","inst","159,383,552"'


def edited(ncu_dir, tmp_path, old: str, new: str, count: int = 1):
    text = (ncu_dir / L4_CSV).read_text()
    assert old in text
    path = tmp_path / "edited.csv"
    path.write_text(text.replace(old, new, count))
    return path


def import_run(path):
    """(exit code, the profile run or None) of `python -m profiling --import path`."""
    code = cli.main([*CONFIG, "--import", str(path), "--device-name", "NVIDIA L4"])
    runs = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.run_kind = 'profile'", output_format="list"
    )
    assert len(runs) <= 1
    return code, (runs[0] if runs else None)


def refused(capsys) -> str:
    """The one error line of an import refused before any run (issue 32: main, exit 1 and a FAILED
    profile run)."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "old,new,count,says",
    [
        # every Mbyte a furlong: main read them as bytes (intensity 48.1)
        (
            '"Mbyte"',
            '"furlong"',
            -1,
            f"edited.csv: {KERNEL0}",
        ),
        (DRAM_READ0, DRAM_READ0.replace('"1.08"', '"-195000"'), 1, "= -1.95e+11 is negative"),
        (
            TIME0,
            TIME0.replace('"96.99"', '"-9500"'),
            1,
            "gpu__time_duration.sum = -0.0095 is negative",
        ),
        (FFMA0, FFMA0.replace('"159,383,552"', '"inf"'), 1, "= inf is not finite"),
        (
            FFMA0,
            FFMA0.replace('"159,383,552"', '"1e300"'),
            1,
            "_ffma_pred_on.sum = 1e+300 is more than a year of the fastest device's work",
        ),
        (
            FFMA0,
            FFMA0.replace('"159,383,552"', '"1e20"'),
            1,
            "2e+20 FLOPs in 96.99 us is 2.06e+24 FLOP/s, above the 1e+19 no GPU reaches",
        ),
    ],
    ids=["furlong", "negative-dram", "negative-time", "inf", "1e300", "1e20"],
)
def test_an_import_that_is_not_a_measurement_fails_naming_kernel_and_metric(
    tracking, ncu_dir, tmp_path, old, new, count, says, capsys
):
    code, run = import_run(edited(ncu_dir, tmp_path, old, new, count))
    assert code == 2 and run is None
    error = refused(capsys)
    assert says in error and KERNEL0 in error and "export the report again" in error


def test_furlong_names_the_unit_and_what_ncu_writes(tracking, ncu_dir, tmp_path, capsys):
    import_run(edited(ncu_dir, tmp_path, '"Mbyte"', '"furlong"', -1))
    assert (
        "metric dram__bytes_read.sum has unit 'furlong', where ncu writes byte, Kbyte, Mbyte, "
        "Gbyte or Tbyte" in refused(capsys)
    )


def test_the_unedited_fixture_still_imports(tracking, ncu_dir):
    code, run = import_run(ncu_dir / L4_CSV)
    assert code == 0 and run.data.metrics["ncu_intensity_dram_flops_per_byte"] == pytest.approx(
        6.94, abs=0.01
    )


# --------------------------------------------------------------------------- bounded reading
def test_a_header_then_nul_bytes_fails_at_line_2_in_bounded_memory(ncu_dir, tmp_path):
    header = (ncu_dir / L4_CSV).read_text().splitlines()[0]
    path = tmp_path / "nul.csv"
    path.write_bytes(header.encode() + b"\n" + b"\0" * 50_000)
    with pytest.raises(NcuParseError, match=r"^nul.csv: line 2 is longer than 1,000 characters"):
        read_ncu_csv(path, keep=is_relevant, max_line_chars=1000)


def test_a_long_line_without_a_header_fails_at_line_1(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("x" * 5000)
    with pytest.raises(NcuParseError, match=r"^long.csv: line 1 is longer than 1,000 characters"):
        read_ncu_csv(path, max_line_chars=1000)


def test_lines_up_to_the_limit_are_read(ncu_dir):
    """The fixture's longest line is 1,9xx characters; a limit of exactly that reads it whole."""
    text = (ncu_dir / L4_CSV).read_text()
    longest = max(len(line) for line in text.splitlines())
    report = read_ncu_csv(ncu_dir / L4_CSV, keep=is_relevant, max_line_chars=longest)
    assert len(report.kernels) == 98
    with pytest.raises(NcuParseError, match=r"line \d+ is longer than"):
        read_ncu_csv(ncu_dir / L4_CSV, keep=is_relevant, max_line_chars=longest - 1)


def test_import_of_nul_bytes_fails_in_one_line(tracking, ncu_dir, tmp_path, capsys):
    """The default limit (1 Mi characters) through the command: 2 MiB of NUL bytes after the header."""
    header = (ncu_dir / L4_CSV).read_text().splitlines()[0]
    path = tmp_path / "nul.csv"
    path.write_bytes(header.encode() + b"\n" + b"\0" * (2 << 20))
    code, run = import_run(path)
    assert code == 2 and run is None
    assert refused(capsys).startswith("error: nul.csv: line 2 is longer than 1,048,576 characters")
