"""The layer rule of docs/architecture.md, read from the code.

common <- roofline <- train <- profiling <- analysis <- gpu_check, with bench and tests on top: a
package imports only packages to its left (bench and tests import anything, each other included). Every
`import` and `from ... import` counts, at module level and inside functions alike (the walk is
tests/test_import_cycles.py's `import_edges`); a failure names the file, the line and the edge.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT
from tests.test_import_cycles import import_edges

LAYERS = ("common", "roofline", "train", "profiling", "analysis", "gpu_check")
TOP = ("bench", "tests")


def _rank(package: str) -> int:
    return LAYERS.index(package) if package in LAYERS else len(LAYERS)


def layer_violations(root: Path) -> list[str]:
    """'path:line: module imports target (package may import only ...)' for every import of a
    package in a layer above the importer's."""
    out = []
    for e in import_edges(root, LAYERS + TOP):
        mine, theirs = e.module.split(".")[0], e.target.split(".")[0]
        if _rank(theirs) > _rank(mine):
            allowed = ", ".join(LAYERS[: _rank(mine)]) or "nothing else"
            out.append(
                f"{e.path.relative_to(root)}:{e.line}: {e.module} imports {e.target} "
                f"({mine} may import only {allowed})"
            )
    return out


def test_no_package_imports_one_above_it():
    assert (ROOT / "train" / "__main__.py").is_file()  # the walk sees the project
    bad = layer_violations(ROOT)
    assert not bad, "imports against the layers of docs/architecture.md:\n" + "\n".join(bad)


def _imported_names(path: Path) -> set[str]:
    """The top-level names of every module `path` imports (third-party ones included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


MLFLOW_MODULES = {
    "common/run_record.py",
    "common/runs.py",
    "common/server.py",
    "common/tracking.py",
    "roofline/store.py",
    "analysis/fetch/__init__.py",
    "analysis/fetch/api.py",
    "analysis/fetch/sql.py",
    "gpu_check/steps.py",
}
"""the modules that import mlflow, as docs/architecture.md lists them: none in train or profiling
(the GPU check's steps read the runs they made)."""


def test_the_roofline_maths_is_pure_and_the_named_modules_alone_talk_to_mlflow():
    """roofline/model.py neither plots nor reads a store; MLFLOW_MODULES alone import mlflow."""
    assert not _imported_names(ROOT / "roofline" / "model.py") & {"mlflow", "matplotlib", "pandas"}
    assert _imported_names(ROOT / "common" / "stats.py") <= {"__future__", "math"}  # stdlib alone
    talks = {
        p.relative_to(ROOT).as_posix()
        for pkg in LAYERS
        for p in (ROOT / pkg).rglob("*.py")
        if "mlflow" in _imported_names(p)
    }
    assert talks == MLFLOW_MODULES


def test_a_function_level_import_of_a_package_above_is_named_with_file_and_line(tmp_path):
    files = {
        "common/__init__.py": "",
        "common/base.py": "import os\n",
        "roofline/__init__.py": "",
        "roofline/model.py": "from common import base\n",  # allowed: common is below
        "train/__init__.py": "",
        "train/run.py": "import roofline.model\n\n\ndef figure():\n    from analysis import fig\n",
        "analysis/__init__.py": "",
        "analysis/fig.py": "from train.run import figure\nfrom profiling import x\n",  # allowed
        "profiling/__init__.py": "",
        "profiling/x.py": "from . import y\nfrom bench import tool\n",  # bench is on top
        "profiling/y.py": "",
        "bench/__init__.py": "",
        "bench/tool.py": "from analysis import fig\nfrom tests import helpers\n",  # allowed
        "tests/__init__.py": "",
        "tests/helpers.py": "import bench.tool\n",  # allowed
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert layer_violations(tmp_path) == [
        "profiling/x.py:2: profiling.x imports bench.tool "
        "(profiling may import only common, roofline, train)",
        "train/run.py:5: train.run imports analysis.fig (train may import only common, roofline)",
    ]


ROOMS = {
    "bench": {"pairing.py"},  # the benchmarks of the tool's own cost share one A/B pairing
    "gpu_check": {"__main__.py", "check.py", "steps.py", "folders.py", "children.py"},
    "profiling/hierarchy": {"table.py", "figure.py", "log.py"},  # the hierarchical roofline
    "tests": {"chaos.py", "config_walk.py"},  # the robustness suite and the walk, run by hand
}
"""where docs/architecture.md says a feature lives: each folder holds at least these files"""
ISSUE_CITATION = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_every_package_is_a_room_of_the_layers_and_holds_what_it_is_named_for():
    """A new top-level package is placed in LAYERS or TOP; the GPU check and the robustness suite
    left bench/ (it holds the overhead benchmarks alone); no two product modules share a name
    that means two things (summary.py, record.py); no product line cites an issue number."""
    packages = {p.parent.name for p in ROOT.glob("*/*.py")}
    assert packages == set(LAYERS + TOP)
    for folder, files in ROOMS.items():
        assert files <= {p.name for p in (ROOT / folder).glob("*.py")}, folder
    product = [p for pkg in LAYERS + ("bench",) for p in (ROOT / pkg).rglob("*.py")]
    assert not {p.name for p in (ROOT / "bench").glob("*.py")} & {"gpu_check.py", "chaos.py"}
    assert not [p for p in product if p.name in ("summary.py", "record.py")]
    cited = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in product
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if ISSUE_CITATION.search(line)
    ]
    assert not cited, (
        "product lines citing an issue number (say the reason instead):\n" + "\n".join(cited)
    )
