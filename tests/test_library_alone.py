"""The library stands alone: importing ``crux`` loads nothing of the lab around it (``cruxlab``), Hydra, MLflow or
matplotlib (a figure imports matplotlib when it is drawn), and no module of the library imports the lab."""
from __future__ import annotations

import ast
import subprocess
import sys

from crux_testing import REPO

LAB = ("cruxlab", "hydra", "hydra_plugins", "mlflow", "omegaconf")
"""Packages of the lab and of what only the lab needs."""


def imported_packages(path) -> set[str]:
    """The top-level packages that the module at ``path`` imports anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_importing_the_library_loads_none_of_the_lab_nor_matplotlib():
    code = "import sys, crux; print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                timeout=300).stdout.split())
    assert "crux" in loaded and "jax" in loaded
    assert loaded.isdisjoint(LAB + ("matplotlib",)), sorted(loaded & set(LAB + ("matplotlib",)))


def test_no_module_of_the_library_imports_the_lab():
    modules = sorted((REPO / "crux").rglob("*.py"))
    assert len(modules) > 20
    importing = {str(path.relative_to(REPO)): sorted(imported_packages(path) & set(LAB)) for path in modules}
    assert {path: lab for path, lab in importing.items() if lab} == {}
