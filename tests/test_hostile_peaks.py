"""Hostile round five, ceilings and the YAML a user gives: a `--peaks-file` or sweep file of
nested aliases is refused before it expands (common/textfile.py), a peaks file entry cannot
replace a built-in device under another name nor be given twice (roofline/vendor.py), and a
peaks run's load is judged by one value rule in every reader (common/load.py LOAD_BOUNDS,
used by roofline/store.py for a run's own roofline and by analysis/screen.py)."""

from __future__ import annotations

import json
import math
import tracemalloc

import mlflow

from analysis import app, roofs, screen
from common.cli import cli_entry
from common.tracking import RunSession
from roofline import vendor
from roofline.store import measured_roof
from train.sweep.__main__ import main as sweep_main


def alias_bomb(path, levels: int = 7) -> None:
    """A YAML peaks file of `levels` nested aliases, ten to a level, as the entry's `aliases`:
    10**levels values in 431 bytes, each alias made a string of them (main, the issue's 466-byte
    file: 3.8 GB and 43 s in `python -m roofline.vendor`, then FINISHED)."""
    lines, prev = ["a: &a [x, x, x, x, x, x, x, x, x, x]"], "a"
    for i in range(1, levels):
        name = chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]")
        prev = name
    lines.append(
        "devices: [{device_name: Box, flops_per_s: {fp32: 1.0e+12}, dram_bytes_per_s: 1.0e+11, "
        f"source: me, aliases: *{prev}}}]"
    )
    path.write_text("\n".join(lines) + "\n")


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------- YAML without aliases
def test_a_peaks_file_of_nested_aliases_is_refused_before_it_expands(tmp_path, capsys):
    bomb = tmp_path / "peaks.yaml"
    alias_bomb(bomb)
    assert bomb.stat().st_size < 500
    tracemalloc.start()
    assert cli_entry(vendor.main)(["--peaks-file", str(bomb)]) == 2
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert one_error(capsys) == (
        f"error: peaks file {bomb} is not valid YAML: aliases (*a) are not read: write each value "
        "out at line 2, column 8"
    )
    assert peak < 20e6


def test_the_analysis_refuses_it_in_one_line_before_any_run(tracking, tmp_path, capsys):
    """main: `python -m analysis` took 4.07 GB and 156 s with it, and ended FINISHED."""
    bomb = tmp_path / "peaks.yaml"
    alias_bomb(bomb)
    assert app.cli(["--peaks-file", str(bomb), "--out", str(tmp_path / "o")]) == 2
    assert one_error(capsys).startswith(f"error: peaks file {bomb} is not valid YAML: aliases")
    assert not mlflow.search_runs(search_all_experiments=True, output_format="list")


def test_a_sweep_file_of_nested_aliases_is_refused(tmp_path, capsys):
    """main read the aliases (here a seed axis made of the batch sizes)."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("matrix: {model: [resnet18], batch_size: &b [2, 4], seed: *b}\n")
    assert sweep_main(["--matrix", str(sweep), "--dry-run"]) == 2
    assert one_error(capsys).startswith(
        f"error: sweep file {sweep} is not valid YAML/JSON: aliases (*b) are not read"
    )


def test_a_sweep_of_100000_runs_is_refused_before_one_is_made(tmp_path, capsys):
    """main planned them all (10 x 10 configurations x 1000 repeats) and printed the plan."""
    sweep = tmp_path / "sweep.json"
    matrix = {"model": ["resnet18"], "batch_size": list(range(1, 11)), "seed": list(range(10))}
    sweep.write_text(json.dumps({"matrix": matrix, "repeats": 1000}))
    assert sweep_main(["--matrix", str(sweep), "--dry-run"]) == 2
    assert one_error(capsys) == (
        "error: matrix: 1 x 10 x 10 values x 1000 repeats are 100,000 runs, more than the 10,000 "
        "of one sweep: split it into sweeps of fewer axes or values"
    )


# ---------------------------------------------------------------- peaks file entries
H100 = "NVIDIA H100 80GB HBM3"


def _peaks_file(tmp_path, *entries) -> str:
    path = tmp_path / "peaks.json"
    path.write_text(json.dumps({"devices": list(entries)}))
    return str(path)


def vendor_error(capsys, argv) -> str:
    """The one error line of `python -m roofline.vendor <argv>` (exit 2)."""
    assert cli_entry(vendor.main)(argv) == 2
    return one_error(capsys)


def test_an_alias_naming_a_built_in_device_is_refused(tmp_path, capsys):
    """main: the entry replaced the H100 (source "vendor: me"): 1502044.9 % of its roof."""
    path = _peaks_file(
        tmp_path,
        {
            "device_name": "My box",
            "aliases": [H100],
            "flops_per_s": {"fp32": 4.4e7},
            "dram_bytes_per_s": 1e9,
            "source": "me",
        },  # fmt: skip
    )
    assert vendor_error(capsys, [H100, "--peaks-file", path]) == (
        f"error: peaks file {path}, entry 1 (My box): alias {H100!r} names the built-in {H100}, "
        "which it would replace: to override that device, give its name as device_name; an alias "
        "only adds another name of the entry's own device"
    )


def test_two_entries_of_one_name_are_refused(tmp_path, capsys):
    """main: the first entry won, silently."""
    box = {"device_name": "Box", "flops_per_s": {"fp32": 1e12}, "dram_bytes_per_s": 1e11}
    path = _peaks_file(tmp_path, {**box, "source": "a"}, {**box, "source": "b"})
    assert vendor_error(capsys, ["Box", "--peaks-file", path]) == (
        f"error: peaks file {path}: entries 1 and 2 both answer to 'Box' (their device_name, an "
        "alias, or the built-in device they override): keep one"
    )


def test_an_override_far_from_the_datasheet_is_refused_and_a_near_one_kept(tmp_path, capsys):
    far = _peaks_file(tmp_path, {"device_name": H100, "flops_per_s": {"fp32": 6.7e7}})
    assert vendor_error(capsys, [H100, "--peaks-file", far]) == (
        f"error: peaks file {far}, entry 1 ({H100}): flops_per_s[fp32] = 6.7e+07 is 1e-06 times "
        f"the datasheet's 6.7e+13 for {H100}: a unit slip? (figures are FLOP/s and byte/s; an "
        "override stays within 10x of the datasheet)"
    )
    near = _peaks_file(tmp_path, {"device_name": H100, "flops_per_s": {"fp32": 5.0e13}})
    assert vendor.lookup(H100, near).flops_per_s == {"fp32": 5.0e13}


# ---------------------------------------------------------------- one load rule, every reader
def _peaks_run(fp32: float, load: tuple[float, float, float]) -> str:
    keys = ("load_average_1m_start", "load_average_1m_max", "cpu_count")
    tags = {"device_name": "CPU Q", "env_label": "box"}
    with RunSession("peaks", run_name="p", tags=tags) as s:
        s.log_metrics({"peak_flops_per_s_fp32": fp32, "peak_dram_bytes_per_s": 2e10})
        s.log_metrics(dict(zip(keys, load)))
    return s.run_id


def test_a_load_that_is_no_measurement_reads_as_not_recorded_in_every_reader(tracking):
    """main: load averages of -1 and 1e9 CPUs made a run quiet on the run page (roofline/store.py,
    unscreened), which took its 5e11 over the quiet run's 2e11, while the analysis blanked -1
    (and kept 1e9 CPUs): the two named different ceilings."""
    quiet = _peaks_run(2e11, (1.0, 8.0, 8))
    _peaks_run(5e11, (-1.0, -1.0, 8))
    _peaks_run(4e11, (1.0, 8.0, 1e9))
    _peaks_run(3e11, (math.nan, math.nan, 8))
    page = measured_roof("CPU Q", "box")
    frame, _ = screen.runs(mlflow.search_runs(search_all_experiments=True))
    frame, lines = screen.values(frame)
    by_env, _, loads = roofs.measured_roofs(frame)
    analysed = by_env[("box", "CPU Q")]
    assert page.flops_per_s["fp32"] == analysed.flops_per_s["fp32"] == 2e11
    assert (
        page.sources["flops:fp32"]
        == analysed.sources["flops:fp32"]
        == (f"measured: peaks run {quiet[:8]}")
    )
    assert sorted(load["trust"] for load in loads.values()) == ["not recorded"] * 3 + ["quiet"]
    assert any("cpu_count = 1e+09" in ln and "above 65536" in ln for ln in lines)


def test_a_peaks_run_with_one_ceiling_that_is_no_peak_is_read_by_no_reader(tracking):
    """main: a quiet peaks run whose fp32 ceiling was -1 gave the run page its DRAM bandwidth (the
    bad ceiling alone was skipped there: roofline/ceilings.py), while the analysis left the whole
    run out (analysis/screen.py) and took the other run's: the two named different ceilings."""
    keys = ("load_average_1m_start", "load_average_1m_max", "cpu_count")
    good = _peaks_run(2e11, (1.0, 8.0, 8))  # dram 2e10
    with RunSession("peaks", run_name="p", tags={"device_name": "CPU Q", "env_label": "box"}) as s:
        s.log_metrics({"peak_flops_per_s_fp32": -1.0, "peak_dram_bytes_per_s": 9e10})
        s.log_metrics(dict(zip(keys, (1.0, 8.0, 8))))
    page = measured_roof("CPU Q", "box")
    frame, lines = screen.runs(mlflow.search_runs(search_all_experiments=True))
    frame, _ = screen.values(frame)
    analysed = roofs.measured_roofs(frame)[0][("box", "CPU Q")]
    assert page.bytes_per_s["dram"] == analysed.bytes_per_s["dram"] == 2e10
    assert page.sources == analysed.sources
    assert page.sources["bytes:dram"] == f"measured: peaks run {good[:8]}"
    assert any(f"left out peaks run {s.run_id[:8]}" in ln for ln in lines)
