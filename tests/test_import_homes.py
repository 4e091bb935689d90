"""Callers import a name of common/ from the module that defines it: no module of common/ passes on
names it imports (common/tracking.py once re-exported twenty from common/record.py, common/runs.py
and common/server.py). Read with `ast` over every project file; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("common", "train", "profiling", "analysis", "gpu_check", "bench", "tests", "roofline")


def defined_names(path: Path) -> set[str]:
    """The names a module binds itself at top level: functions, classes, assignments (also inside a
    top-level if/try)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def borrowed_imports(root: Path, home: str) -> list[str]:
    """`file:line from <module> import <name>` for every import, anywhere in the project, of a name
    that a module of package `home` does not define (a re-export), and is not a submodule."""
    modules = {
        ".".join(p.relative_to(root).with_suffix("").parts): p
        for p in sorted((root / home).rglob("*.py"))
    }
    modules = {m.removesuffix(".__init__"): p for m, p in modules.items()}
    defined = {m: defined_names(p) for m, p in modules.items()}
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).is_dir() else []:
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.module in modules):
                    continue
                for alias in node.names:
                    name = alias.name
                    if name not in defined[node.module] and f"{node.module}.{name}" not in modules:
                        rel = path.relative_to(root)
                        found.append(f"{rel}:{node.lineno} from {node.module} import {name}")
    return found


def test_names_of_common_are_imported_from_the_module_that_defines_them():
    assert "RunSession" in defined_names(ROOT / "common" / "tracking.py")  # the reader works
    found = borrowed_imports(ROOT, "common")
    assert not found, "import these from the module that defines them:\n" + "\n".join(found)


def test_a_re_exported_name_is_found(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "__init__.py").write_text("")
    (tmp_path / "common" / "record.py").write_text("class RunRecord:\n    pass\n")
    (tmp_path / "common" / "tracking.py").write_text(
        "from common.record import RunRecord\n\nclass RunSession:\n    pass\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "from common.tracking import RunRecord, RunSession\nfrom common import record\n"
    )
    assert borrowed_imports(tmp_path, "common") == [
        "tests/test_x.py:1 from common.tracking import RunRecord"
    ]
