"""profiling.ncu.parse: every recorded ncu output parses, with SI values and the quirks of each format."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from profiling.ncu.messages import NO_KERNELS_MESSAGE, PERM_MESSAGE, legacy_message
from profiling.ncu.nvtx import nvtx_ranges
from profiling.ncu.parse import NcuParseError, parse_ncu_csv, read_ncu_csv
from profiling.ncu.units import parse_number, unit_scale

MESSAGES = Path(__file__).resolve().parent / "data" / "ncu_messages"
L4 = "l4_resnet18_bs64_train_step_details_nvtx.csv"
SAXPY = "rtx5070_saxpy_n16777216_details.csv"
GEMM = "rtx5070_gemm_tiled_2048_details.csv"
B200 = "b200_decode_raw_page.csv"


@pytest.mark.parametrize(
    "name, page, kernels",
    [(L4, "details", 98), (SAXPY, "details", 1), (GEMM, "details", 1), (B200, "raw", 16)],
)
def test_every_csv_fixture_parses(ncu_dir, name, page, kernels):
    report = read_ncu_csv(ncu_dir / name)
    assert report.page == page
    assert len(report.kernels) == kernels
    assert all(k.name for k in report.kernels)
    assert report.na == {}


def test_l4_details_page_with_nvtx_columns(ncu_dir):
    report = read_ncu_csv(ncu_dir / L4)
    assert report.has_nvtx
    k = report.kernels[0]
    assert k.id == 0 and k.name.startswith("void implicit_convolve_sgemm<float, float")
    assert k.attrs["Block Size"] == "(8, 8, 1)" and k.attrs["CC"] == "8.9"
    # the fixture's push/pop stack: train_step, then the phase
    assert k.nvtx_push_pop == ("train_step", "forward") and k.phase == "forward"
    # "1.08" Mbyte -> 1,080,000 byte; "96.99" usecond -> 96.99e-6 s
    assert k.metrics["dram__bytes_read.sum"] == pytest.approx(1.08e6, rel=1e-12)
    assert k.units["dram__bytes_read.sum"] == "byte"
    assert k.metrics["gpu__time_duration.sum"] == pytest.approx(96.99e-6, rel=1e-12)
    assert k.units["gpu__time_duration.sum"] == "second"
    phases = [k.phase for k in report.kernels]
    assert phases.count("forward") == 89 and phases.count("backward") == 1
    assert phases.count("optimizer_step") == 6 and phases.count("loss") == 2


def test_saxpy_bom_crlf_prof_lines_and_thousands_separators(ncu_dir):
    raw = (ncu_dir / SAXPY).read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw  # the quirks are really in the file
    report = read_ncu_csv(ncu_dir / SAXPY)
    assert [m.split()[:2] for m in report.messages] == [
        ["==PROF==", "Connected"],
        ["==PROF==", "Disconnected"],
    ]
    assert report.program_lines == 6  # device:, measuring..., theoretical, measured, wrote, NVML
    k = report.kernels[0]
    assert k.metrics["dram__bytes_op_read.sum"] == 134_221_568
    assert k.metrics["gpu__time_duration.sum"] == pytest.approx(292_928e-9, rel=1e-12)
    assert k.attrs["CC"] == "12.0" and not report.has_nvtx


def test_b200_raw_page_units_row_and_device_name(ncu_dir):
    report = read_ncu_csv(ncu_dir / B200)
    assert report.device_name == "NVIDIA B200"
    k0 = report.kernels[0]
    assert k0.metrics["gpu__time_duration.sum"] == pytest.approx(
        9920e-9, rel=1e-12
    )  # units row: ns
    assert k0.units["launch__shared_mem_config_size"] == "byte"
    assert [k.id for k in report.kernels] == list(range(16))


def test_keep_filter_limits_stored_metrics_but_keeps_device_name(ncu_dir):
    report = read_ncu_csv(ncu_dir / B200, keep=lambda n: n == "gpu__time_duration.sum")
    assert set(report.kernels[0].metrics) == {"gpu__time_duration.sum"}
    assert report.device_name == "NVIDIA B200"


@pytest.mark.parametrize(
    "unit, scale, base",
    [
        ("byte", 1.0, "byte"),
        ("Kbyte", 1e3, "byte"),
        ("Mbyte", 1e6, "byte"),
        ("Gbyte", 1e9, "byte"),
        ("ns", 1e-9, "second"),
        ("nsecond", 1e-9, "second"),
        ("usecond", 1e-6, "second"),
        ("msecond", 1e-3, "second"),
        ("second", 1.0, "second"),
        ("Gbyte/second", 1e9, "byte/second"),
        ("Kinst", 1e3, "inst"),
        ("inst/cycle", 1.0, "inst/cycle"),
        ("Ghz", 1e9, "hz"),
        ("%", 1.0, "%"),
        ("", 1.0, ""),
    ],
)
def test_unit_prefixes_scale_by_1000(unit, scale, base):
    s, b = unit_scale(unit)
    assert s == pytest.approx(scale, rel=1e-12) and b == base


def test_numbers_thousands_separators_and_na():
    assert parse_number("134,221,568") == 134_221_568
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("3.71") == 3.71
    assert math.isnan(parse_number("n/a"))
    assert parse_number("") is None
    with pytest.raises(ValueError):
        parse_number("1,5")  # not a thousands separator: refuse rather than guess
    with pytest.raises(ValueError):
        parse_number("Tesla T4")


def test_nvtx_push_pop_cell_from_fixture():
    cell = (
        '3984  "<default domain>:train_step:none:none:none:none:none:none"  '
        '"<default domain>:backward:none:none:none:none:none:none" '
    )
    assert nvtx_ranges(cell) == ("train_step", "backward")
    assert nvtx_ranges("") == ()


def test_nvtx_start_end_cell_sorted_by_range_id_and_colons_in_names():
    cell = '"7:<default domain>:forward:none:none:none:none:none:none" "3:<default domain>:train_step:none:none:none:none:none:none"'
    assert nvtx_ranges(cell) == ("train_step", "forward")
    assert nvtx_ranges('"<default domain>:a:b:none:none:none:none:none:none"') == ("a:b",)


HEADER_RULES = (
    '"ID","Process ID","Process Name","Host Name",'
    '"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
    '"Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
    '"Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name",'
    '"Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description",'
    '"Estimated Speedup Type","Estimated Speedup"'
)


def _row(kid, metric, unit, value, rule=("", "", "", "", "")):
    """One details-page row as ncu quotes it (every field quoted, inner quotes doubled)."""
    se = '"1:<default domain>:train_step:none:none:none:none:none:none" "2:<default domain>:backward:none:none:none:none:none:none"'
    cells = [
        str(kid),
        "77",
        "python3",
        "127.0.0.1",
        "",
        se,
        "k<float>(int)",
        "1",
        "7",
        "(256, 1, 1)",
        "(8, 1, 1)",
        "0",
        "9.0",
        "Speed Of Light",
        metric,
        unit,
        value,
        *rule,
    ]
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="").writerow(cells)
    return buf.getvalue()


def test_details_page_with_start_end_ranges_rule_rows_and_interleaved_output():
    text = "\n".join(
        [
            "==PROF== Connected to process 77 (/usr/bin/python3)",
            "warmup done",
            HEADER_RULES,
            _row(0, "dram__bytes_read.sum", "Kbyte", "2.50"),
            "==PROF== Profiling kernel - 0: 0%....50%....100% - 9 passes",
            _row(0, "", "", "", ("SOLBottleneck", "OPT", "This kernel ...", "global", "12.5")),
            "program printed this, with, commas",
            _row(0, "gpu__time_duration.sum", "msecond", "1.5"),
            _row(1, "dram__bytes_read.sum", "byte", "n/a"),
        ]
    )
    report = parse_ncu_csv(text)
    assert report.page == "details" and report.has_nvtx
    assert [k.id for k in report.kernels] == [0, 1]
    k0 = report.kernels[0]
    assert k0.nvtx_start_end == ("train_step", "backward") and k0.phase == "backward"
    assert k0.metrics == {"dram__bytes_read.sum": 2500.0, "gpu__time_duration.sum": 1.5e-3}
    assert math.isnan(report.kernels[1].metrics["dram__bytes_read.sum"])
    assert report.na == {"dram__bytes_read.sum": 1}
    assert report.program_lines == 2 and len(report.messages) == 2


def test_raw_page_kbyte_units_row():
    text = "\r\n".join(
        [
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
            '"Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__func_cache_config"',
            '"","","","","","","","","","","","Kbyte","usecond",""',
            '"0","1","p","h","a","1","7","(1, 1, 1)","(1, 1, 1)","0","8.0","1,024.5","2.5","CachePreferNone"',
            '"1","1","p","h","b","1","7","(1, 1, 1)","(1, 1, 1)","0","8.0","n/a","3",""',
        ]
    )
    report = parse_ncu_csv("\ufeff" + text)
    assert report.page == "raw"
    a, b = report.kernels
    assert a.metrics["dram__bytes_read.sum"] == pytest.approx(1_024_500.0, rel=1e-12)
    assert a.metrics["gpu__time_duration.sum"] == pytest.approx(2.5e-6, rel=1e-12)
    assert a.texts["launch__func_cache_config"] == "CachePreferNone"
    assert report.na == {"dram__bytes_read.sum": 1} and b.metrics[
        "gpu__time_duration.sum"
    ] == pytest.approx(3e-6)


def test_not_ncu_csv_is_a_one_line_error():
    with pytest.raises(
        NcuParseError,
        match=r'not_ncu.csv is not Nsight Compute CSV output \(no header row starting with "ID"\)',
    ):
        read_ncu_csv(MESSAGES / "not_ncu.csv")


def test_nvprof_output_is_named_as_such():
    with pytest.raises(NcuParseError, match="nvprof output, not Nsight Compute"):
        read_ncu_csv(MESSAGES / "nvprof_metrics.csv")


@pytest.mark.parametrize(
    "log, reason",
    [
        ("err_nvgpuctrperm.log", PERM_MESSAGE),
        ("no_kernels.log", NO_KERNELS_MESSAGE),
        ("legacy_flop_count_sp.log", legacy_message(["flop_count_sp"])),
    ],
)
def test_a_log_of_ncu_messages_gets_the_same_reason_as_a_failed_capture(log, reason):
    with pytest.raises(NcuParseError) as err:
        read_ncu_csv(MESSAGES / log)
    assert str(err.value) == f"{log} holds ncu's messages but no counter table: {reason}"


def test_the_classifier_is_pure_and_imports_no_capture_code():
    """The parser and the classifier (profiling.ncu.messages, which the import path uses too) import no
    capture code and no mlflow."""
    import subprocess
    import sys

    code = (
        "import sys, profiling.ncu.parse, profiling.ncu.messages as p; "
        "bad = [m for m in ('mlflow', 'profiling.ncu.command', 'profiling.ncu.totals', 'profiling.cli') if m in sys.modules]; "
        "assert not bad, bad; "
        "assert p.classify_ncu_output('==ERROR== ERR_NVGPUCTRPERM', 1) == p.PERM_MESSAGE"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1]
    )


DETAILS_HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Metric Name","Metric Unit","Metric Value"'


def test_a_table_whose_rows_cannot_be_read_is_not_called_empty(tmp_path):
    f = tmp_path / "mangled.csv"
    f.write_text(
        "\n".join(
            [
                DETAILS_HEADER,
                '"x7","1","p","h","k","dram__bytes_read.sum","byte","5"',
                '"x8","1","p"',
            ]
        )
    )
    with pytest.raises(NcuParseError) as err:
        read_ncu_csv(f)
    msg = str(err.value)
    assert msg.startswith(
        "mangled.csv: none of the 2 rows under its ncu table header could be read as a result"
    )
    assert "launch-skip" not in msg


def test_a_header_without_rows_is_a_truncated_export():
    with pytest.raises(NcuParseError, match="^cut.csv has an ncu table header but no result rows"):
        parse_ncu_csv(DETAILS_HEADER + "\n", source="cut.csv")
    raw = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n'  # raw page: header and units row only
    with pytest.raises(NcuParseError, match="^raw.csv has an ncu table header but no result rows"):
        parse_ncu_csv(raw, source="raw.csv")


# ---------------------------------------------------------------- phase: the known phase name, not the range order
def _se(*ranges: tuple[int, str]) -> str:
    return " ".join(
        f'"{rid}:<default domain>:{name}:none:none:none:none:none:none"' for rid, name in ranges
    )


def _pp(*names: str) -> str:
    return "77  " + "  ".join(
        f'"<default domain>:{n}:none:none:none:none:none:none"' for n in names
    )


@pytest.mark.parametrize(
    "push_pop, start_end, phase",
    [
        # start/end ids that list the outer range last: by order the phase would be "train_step"
        ("", _se((1, "forward"), (2, "train_step")), "forward"),
        ("", _se((5, "train_step"), (9, "backward")), "backward"),
        # a user's own range inside the phase: the known name still wins
        (_pp("train_step", "optimizer", "my_clip_grad"), "", "optimizer"),
        # start/end (process-wide) before push/pop
        (_pp("train_step", "forward"), _se((3, "train_step"), (4, "backward")), "backward"),
        # no known name: the innermost range as listed (the L4 fixture's "loss")
        (_pp("train_step", "loss"), "", "loss"),
        # ranges that carry their NVTX domain as domain@name (ncu's notation)
        (_pp("train_step", "roofline@backward"), "", "backward"),
        ("", _se((1, "NVTX@train_step"), (2, "NVTX@optimizer")), "optimizer"),
        (_pp("other@thing"), "", "other@thing"),
        ("", "", None),
    ],
)
def test_phase_is_the_known_phase_name_whatever_the_range_order(push_pop, start_end, phase):
    header = (
        '"ID","Process ID","Process Name","Host Name",'
        '"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
        '"Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
        '"Kernel Name","Metric Name","Metric Unit","Metric Value"'
    )
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="").writerow(
        ["0", "77", "python3", "h", push_pop, start_end, "k", "gpu__time_duration.sum", "ns", "5"]
    )
    (k,) = parse_ncu_csv(header + "\n" + buf.getvalue()).kernels
    assert k.phase == phase


def test_phase_names_are_the_ones_train_marks():
    from profiling.ncu.nvtx import PHASE_NAMES
    from train.step import PHASES

    assert PHASE_NAMES == tuple(p for p in PHASES if p != "train_step")


# ---------------------------------------------------------------- truncated input
def _cut(ncu_dir, name: str, end: int | None = None, lines: int | None = None) -> str:
    """A fixture cut as a copy or export that stopped early would be: at byte `end`, or after its
    first `lines` lines (with their line ends)."""
    data = (ncu_dir / name).read_bytes()
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[:lines])
    return data[:end].decode("utf-8-sig", errors="replace")


@pytest.mark.parametrize("name", [L4, SAXPY, GEMM, B200])
def test_no_recorded_ncu_output_is_called_truncated(ncu_dir, name):
    """Real files end as ncu ends a table: whole rows, closing quotes, a line end, and the same
    metrics for the last result as for the one before it."""
    assert read_ncu_csv(ncu_dir / name).truncated == ""
    # the last line end alone is no cut: its row is whole
    assert parse_ncu_csv(_cut(ncu_dir, name).rstrip("\r\n")).truncated == ""


def test_the_l4_fixture_cut_in_half_is_called_truncated(ncu_dir):
    """The issue-15 case: `head -c $((size/2))` stops mid-row; before, it read as 49 kernels at
    44.4 FLOP/byte instead of 98 at 6.94, with no word of warning."""
    size = (ncu_dir / L4).stat().st_size
    report = parse_ncu_csv(_cut(ncu_dir, L4, end=size // 2), source="cut.csv")
    assert len(report.kernels) == 49
    assert report.truncated == "its last row has 15 of the header's 17 fields"


@pytest.mark.parametrize(
    "name, drop, reason",
    [  # cut inside the last value: the row has all its fields but the value lost digits
        (L4, 2, "its last line stops inside a row"),
        (B200, 3, "its last line stops inside a row"),
        (B200, 4, "its last line stops inside a row"),  # just after the comma before it
        # cut just after the value before it: one field short of a whole row
        (B200, 5, "its last row has"),
    ],
)
def test_a_cut_inside_the_last_row_is_called_truncated(ncu_dir, name, drop, reason):
    text = _cut(ncu_dir, name)
    report = parse_ncu_csv(text[: -drop - (1 if text.endswith("\r\n") else 0)])
    assert report.truncated.startswith(reason)


def test_a_cut_at_a_line_end_inside_a_result_is_called_truncated(ncu_dir):
    """`head -n 781`: kernel 97 keeps 4 of its 8 metric rows; every whole row still parses."""
    report = parse_ncu_csv(_cut(ncu_dir, L4, lines=781))
    assert len(report.kernels) == 98
    assert report.truncated == (
        "its last result has 4 of the 8 metrics of the result before it (4 missing)"
    )
    # a cut between two results cannot be seen: a file of 97 whole results is a whole file
    assert parse_ncu_csv(_cut(ncu_dir, L4, lines=777)).truncated == ""
