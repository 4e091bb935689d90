"""Hostile round five, imports: what an `--import` may cost is bounded before its files are read
(profiling/ncu/budget.py), and every value is checked where it enters, naming the file it came
from (profiling/ncu/checks.py, profiling/ncu/capture_set.py).

The capture sets are cut from NERSC's DeepCAM folder (tests/data/ncu/deepcam_v100_o2_adam_bw/):
four of its one-metric files, each cut to its first launches, so that each import reads in well
under a second. Every refusal is one `error:` line on stderr, exit 2, before any run exists.
"""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import mlflow
import pytest

from profiling import cli
from profiling.ncu.parse import read_ncu_csv
from tests.conftest import NCU_FIXTURES

DEEPCAM = NCU_FIXTURES / "deepcam_v100_o2_adam_bw"
FILES = (
    "out.dram__bytes.sum",
    "out.sm__cycles_elapsed.avg",
    "out.sm__cycles_elapsed.avg.per_second",
    "out.sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
)
LAUNCHES = 30
V100 = ["--device-name", "Tesla V100-SXM2-16GB", "--batch", "2", "--env-label", "cori"]


def _cut(name: str, launches: int = LAUNCHES) -> list[str]:
    """The lines of DeepCAM file `name` up to its table's header, then its first `launches`."""
    lines = gzip.decompress((DEEPCAM / f"{name}.gz").read_bytes()).decode().splitlines(True)
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = [
        ln
        for ln in lines[head + 1 :]
        if ln.startswith('"') and int(ln[1:].split('"')[0]) < launches
    ]
    return lines[: head + 1] + rows


def _set_value(lines: list[str], launch: int, value: str) -> list[str]:
    """`lines` with the value of launch `launch` replaced by `value`."""
    out = list(lines)
    i = next(n for n, ln in enumerate(out) if ln.startswith(f'"{launch}",'))
    cells = out[i].rstrip("\r\n").split('","')
    cells[-1] = f'{value}"'
    out[i] = '","'.join(cells) + "\n"
    return out


def small_set(folder, edits=None):
    """A capture set of FILES (LAUNCHES launches each) in `folder`; `edits` maps a file name to a
    function of its lines."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        lines = _cut(name)
        if edits and name in edits:
            lines = edits[name](lines)
        (folder / f"{name}.csv").write_text("".join(lines))
    return folder


def refused(capsys, argv) -> str:
    """The one error line of `python -m profiling <argv>`, refused before any run (exit 2)."""
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not mlflow.search_runs(search_all_experiments=True, output_format="list")
    return lines[0]


def import_argv(*paths, phase=("backward",), workload="deepcam") -> list[str]:
    return ["--import", *map(str, paths), "--workload", workload, "--phase", *phase, *V100]


def test_the_small_set_imports(tmp_path):
    """What the refusals below are held against: the unedited small set reads, merges and sums
    (the steps `python -m profiling --import` takes before its run exists)."""
    args = cli.build_parser().parse_args(import_argv(small_set(tmp_path / "set")))
    cli._config(args)
    report, device, summary, _, files = cli._imported(args)
    assert len(files) == len(FILES) and len(summary.kernels) == LAUNCHES
    assert device == "Tesla V100-SXM2-16GB" and summary.totals["dram_bytes"] > 0


# ---------------------------------------------------------------- costs bounded before reading
def newline_gzip(path, total: int, block: int = 1 << 20, crc: bool = False) -> None:
    """A gzip of `total` bytes of newlines, 1 KB per MiB: one deflate block of a MiB of newlines,
    compressed once and repeated (a full flush resets the compressor, so each copy is the same).
    Its CRC is 0 unless `crc` (a reader that gets to the end has read `total` bytes)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    one = c.compress(b"\n" * block) + c.flush(zlib.Z_FULL_FLUSH)
    check = 0
    for _ in range(total // block if crc else 0):
        check = zlib.crc32(b"\n" * block, check)
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
        for _ in range(total // block):
            fh.write(one)
        fh.write(c.flush() + struct.pack("<II", check, total & 0xFFFFFFFF))


def test_a_2_mb_gzip_of_2_gib_of_newlines_is_refused_after_reading_4_mib(tmp_path, monkeypatch):
    """main read every line: still reading after 300 s (a 64 MiB one: 253 s, 412 MB). Its line
    ends are counted as its bytes are decompressed, ahead of the parser: its first 4 MiB hold
    more than MAX_LINES of them."""
    from profiling.ncu import budget

    bomb = tmp_path / "zz_extra.gz"
    newline_gzip(bomb, 2 * 1024**3)
    assert bomb.stat().st_size < 3e6
    taken = []
    take = budget.ReadBudget.take_bytes
    monkeypatch.setattr(
        budget.ReadBudget, "take_bytes", lambda b, n, s: (taken.append(n), take(b, n, s))
    )
    tracemalloc.start()
    with pytest.raises(budget.ImportTooLarge) as err:
        read_ncu_csv(bomb)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(err.value).startswith(
        "--import: zz_extra.gz holds more than 2,000,000 lines, the most one import reads (all "
        "files together); it is not the export of one profiled step"
    )
    assert sum(taken) == budget.READ_AHEAD_BYTES  # decompressed: its first 4 MiB, not 2 GiB
    assert peak < 50e6


def test_the_bomb_in_a_capture_set_is_one_line(tracking, tmp_path, capsys):
    folder = small_set(tmp_path / "set")
    newline_gzip(folder / "zz_extra.gz", 8 * 1024**2, crc=True)  # main: skipped, not ncu output
    line = refused(capsys, import_argv(folder))
    assert line.startswith("error: --import: zz_extra.gz holds more than 2,000,000 lines")


def test_results_are_bounded_per_import_all_files_together(tracking, tmp_path, capsys, monkeypatch):
    """main: a 7.9 MB gzip of a header and 3 M rows held 4.56 GB before "has no launch 1426".
    The bound counts every file of the import (here lowered to 100 results: four files of 30)."""
    from profiling.ncu import budget

    monkeypatch.setattr(budget, "MAX_RESULTS", 100)
    line = refused(capsys, import_argv(small_set(tmp_path / "set")))
    assert line == (
        f"error: --import: {FILES[3]}.csv holds more than 100 results (kernel launches), the most "
        "one import reads (all files together); it is not the export of one profiled step: export "
        "only the profiled step (ncu --launch-skip/--launch-count, --metrics) or check that it is "
        "the right file"
    )


def results_gzip(path, results: int) -> None:
    """A gzip of DeepCAM's header and `results` one-row results with distinct IDs and short
    cells (the parser reads each as a result): 6 MB of text in 0.3 MB for 100,001."""
    lines = _cut(FILES[0], 0)
    row = '","1","p","h","k","t","1","7","s","dram__bytes.sum","byte","1"\n'
    body = "".join(lines) + "".join(f'"{i}{row}' for i in range(results))
    path.write_bytes(gzip.compress(body.encode(), 1))


def test_a_small_gzip_of_many_results_is_refused_before_one_is_built(
    tracking, tmp_path, capsys, monkeypatch
):
    """main: a 1.9 MB gzip of 250,001 one-row results was refused at the results bound after 96 s,
    500 MB traced and +1 GB RSS, every result built first (about 130 us and 2 KB each here). Each
    file's results are counted in a dry run before it is parsed (budget.refuse_many_results): the
    parser builds none of the bomb's."""
    from profiling.ncu import budget, parse

    folder = small_set(tmp_path / "set")
    results_gzip(folder / "zz_extra.gz", budget.MAX_RESULTS + 1)
    assert (folder / "zz_extra.gz").stat().st_size < 1e6
    built = []
    build = parse._kernel_from_row
    monkeypatch.setattr(parse, "_kernel_from_row", lambda *a: (built.append(1), build(*a))[1])
    line = refused(capsys, import_argv(folder))
    assert line.startswith(
        "error: --import: zz_extra.gz holds more than 100,000 results (kernel launches), the most "
        "one import reads (all files together); it is not the export of one profiled step"
    )
    assert len(built) == len(FILES) * LAUNCHES  # the small set's, none of the bomb's


def test_a_refused_file_pays_for_neither_torch_nor_matplotlib(tmp_path):
    """main imported torchvision (to check that a --workload is no torchvision model) and the
    breakdown's matplotlib before reading a file: a refused file cost 51.8 s and 918 MB RSS here
    (load 9.5). The model is checked once the files are read, the figures' modules when drawn."""
    bad = tmp_path / "bad.csv"
    bad.write_text("hello\n")
    code = (
        "import sys\n"
        "from profiling import cli\n"
        f"code = cli.main(['--import', {str(bad)!r}, '--workload', 'deepcam', *{V100!r}])\n"
        "heavy = ('torch', 'torchvision', 'matplotlib', 'mlflow')\n"
        "print('EXIT', code, [m for m in heavy if m in sys.modules])\n"
    )
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'm.db'}")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env
    )
    assert done.stdout.strip() == "EXIT 2 []", done.stdout + done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: bad.csv is not Nsight Compute CSV")
    assert "Traceback" not in done.stderr and not (tmp_path / "m.db").exists()


def test_text_is_bounded_per_import_as_it_is_decompressed(tmp_path, monkeypatch):
    from profiling.ncu import budget

    monkeypatch.setattr(budget, "MAX_TEXT_BYTES", 20_000)
    big = tmp_path / "big.gz"
    big.write_bytes(gzip.compress("".join(_cut(FILES[0], 200)).encode()))
    assert big.stat().st_size < 20_000
    with pytest.raises(
        budget.ImportTooLarge, match=r"^--import: big.gz holds more than 0.0191 MiB"
    ):
        read_ncu_csv(big)


def test_a_row_repeated_under_one_result_is_refused_at_its_bound(tracking, tmp_path, capsys):
    """A gzip of one details row copied over and over (11 MB for 2 GiB): one result, so neither
    the results bound nor (at 551 bytes a line) the lines bound stopped it before 1 GiB of text,
    368 s here. A result's rows are bounded (MAX_ROWS_PER_RESULT, 10,000), so its first 5.5 MB."""
    folder = small_set(tmp_path / "set")
    lines = _cut(FILES[0])
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    body = "".join(lines[: head + 1]) + lines[-1] * 10_001
    (folder / "zz_extra.gz").write_bytes(gzip.compress(body.encode(), 1))
    line = refused(capsys, import_argv(folder))
    assert line.startswith(
        "error: --import: zz_extra.gz holds more than 10,000 rows for result 29 (a profiled kernel"
    )


def test_300_files_as_300_paths_are_refused_before_one_is_read(tracking, tmp_path, capsys):
    """main: the 256-file bound applied per PATH; 300 files given as 300 PATHs were read (975 MB)."""
    paths = []
    for i in range(300):
        (tmp_path / f"f{i:03d}.csv").write_text("not read")
        paths.append(tmp_path / f"f{i:03d}.csv")
    line = refused(capsys, ["--import", *map(str, paths), *V100])
    assert line == (
        "error: --import: the 300 PATH(s) hold more than the 256 files of one capture set: pass "
        "the files (or folder) of one profile"
    )


# ---------------------------------------------------------------- values checked at the door
@pytest.mark.parametrize(
    "name,edit,says",
    [
        (
            FILES[1],
            lambda lines: _set_value(lines, 5, "1e308"),
            "metric sm__cycles_elapsed.avg = 1e+308 is more than a year of cycles at the fastest clock",
        ),
        (
            FILES[0],
            lambda lines: _set_value(lines, 5, ""),
            "no value of dram__bytes.sum, which 29 other kernels of the file have (an empty cell?)",
        ),
        (
            FILES[2],
            lambda lines: _set_value(lines, 5, "0"),
            "metric sm__cycles_elapsed.avg.per_second = 0 is no clock rate",
        ),
        (
            FILES[0],
            lambda lines: _set_value(lines, 5, "-8384"),
            "metric dram__bytes.sum = -8384 is negative",
        ),
    ],
    ids=["1e308-cycles", "empty-value", "zero-clock", "negative-in-a-set"],
)
def test_a_bad_value_in_a_set_names_its_file_and_a_fix_for_that_file(
    tracking, tmp_path, capsys, name, edit, says
):
    """main: 1e308 cycles imported FINISHED and complete with a kernel time of 7.7e298 s; an
    empty value or a clock of 0 left that kernel's bytes or time NaN while the run said complete;
    a negative value was refused naming the folder and advising `ncu ... > set/ (4 files)`."""
    line = refused(capsys, import_argv(small_set(tmp_path / "set", {name: edit})))
    assert line.startswith(f"error: {name}.csv: kernel 5 (void at::native::") and says in line
    assert line.endswith(f"export {name}.csv again from its capture, or leave it out of the set")


def test_a_conflicting_copy_of_a_metric_file_is_refused(tracking, tmp_path, capsys):
    """main: a second copy of one metric file with other values was merged, the first by name
    kept, FINISHED (a note at most)."""
    folder = small_set(tmp_path / "set")
    copy = _set_value(_cut(FILES[0]), 3, "99999")
    (folder / "out.dram__bytes.sum.v2.csv").write_text("".join(copy))
    line = refused(capsys, import_argv(folder))
    assert line == (
        "error: out.dram__bytes.sum.v2.csv holds only counters that out.dram__bytes.sum.csv holds "
        "already (dram__bytes.sum), with other values on 1 launches: two captures of the same "
        "counters, and either could be the right one; import only one of them"
    )


def test_one_folder_given_as_two_phases_is_refused(tracking, tmp_path, capsys):
    """main: `--import d d --phase forward backward` doubled the FLOPs, FINISHED."""
    folder = small_set(tmp_path / "set")
    line = refused(capsys, import_argv(folder, folder, phase=("forward", "backward")))
    assert line == (
        f"error: --import: {folder / FILES[0]}.csv is given twice (in {folder} as forward and in "
        f"{folder} as backward): its counters would count twice; give each file once"
    )


# ---------------------------------------------------------------- which file is to blame
def test_a_launch_mismatch_names_the_file_that_differs(tracking, tmp_path, capsys):
    """main blamed the first file by name (the good one): "out.dram__bytes.sum.csv has no launch
    30 where zz.csv has one"."""
    folder = small_set(tmp_path / "set")
    extra = _cut("out.lts__t_bytes.sum", LAUNCHES + 5)
    (folder / "zz.csv").write_text("".join(extra))
    line = refused(capsys, import_argv(folder))
    assert line.startswith(
        "error: zz.csv holds 35 launches where the other 4 files of backward hold 30: launch 30 "
        "is only in it (5 launches differ)"
    )


def test_a_cut_file_of_a_set_is_not_told_to_use_allow_truncated(tracking, tmp_path, capsys):
    """main: "... or pass --allow-truncated", which then failed with "has no launch 27"."""
    folder = small_set(tmp_path / "set", {FILES[0]: lambda lines: lines[:-3] + [lines[-3][:40]]})
    for flags in ([], ["--allow-truncated"]):
        line = refused(capsys, import_argv(folder) + flags)
        assert line.startswith(f"error: {FILES[0]}.csv is truncated: its last row has 5 of")
        assert "it is one of the 4 files of backward" in line
        assert line.endswith("cannot be merged (nor logged with --allow-truncated): copy or "
                             "export it again, or import it alone")  # fmt: skip


# ---------------------------------------------------------------- names of the import
@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--workload", "deepcam\nerror: forged", "holds a character that is not printable"),
        ("--workload", "w" * 10_000, "10000 characters long, where a name is at most 100"),
        ("--device-name", "V100\nerror: forged", "holds a character that is not printable"),
        ("--device-name", "V" * 10_000, "10000 characters long, where a name is at most 100"),
    ],
    ids=["workload-newline", "workload-10000", "device-newline", "device-10000"],
)
def test_names_of_an_import_are_one_line_of_at_most_100_characters(
    tracking, tmp_path, capsys, flag, value, says
):
    """main: a newline forged an `error:` line on the console; 10,000 characters were stored cut
    to 6,000 (param) or 8,000 (tag)."""
    argv = import_argv(small_set(tmp_path / "set")) + [flag, value]
    line = refused(capsys, argv)
    assert line.startswith(f"error: {flag} {value[:40]!r}") and says in line


def test_a_torchvision_model_is_no_workload(tracking, tmp_path, capsys):
    """main: `--workload resnet50` was logged with a torchvision resnet50's config key, its count
    check skipped."""
    line = refused(capsys, import_argv(small_set(tmp_path / "set"), workload="resnet50"))
    assert line == (
        "error: --workload resnet50 is the torchvision model resnet50: give --model resnet50 "
        "instead, so that the import is checked against its counted training FLOPs (--workload "
        "names programs that are not torchvision models)"
    )
