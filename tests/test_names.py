"""One meaning per name: no two modules of the library or the lab define a top-level class or function of the
same name, so that a name read anywhere in crux/ or cruxlab/ means one thing and a search for it finds that thing.

A name with a leading underscore is its module's own: the second test checks that no module imports another's, so
two private helpers of one name never meet. Names every command-line module defines by the same protocol are
allowed by name, each with its reason.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("crux", "cruxlab")

PROTOCOL = {
    "main": "a command's entry point, `main(argv)`: the console script, `python -m` or scripts/NAME.py calls it",
}


def _modules() -> dict[str, ast.Module]:
    """Each module of the packages by its dotted name, parsed."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = ast.parse(path.read_text(encoding="utf-8"))
    return modules


def _public_definitions(modules: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Public top-level class and function name -> the modules that define one."""
    defined = defaultdict(list)
    for module, tree in modules.items():
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                defined[node.name].append(module)
    return defined


def test_no_two_modules_define_a_public_class_or_function_of_one_name():
    defined = _public_definitions(_modules())
    shared = {name: where for name, where in defined.items() if len(where) > 1 and name not in PROTOCOL}
    assert shared == {}, "rename one of each so that the name says what it is: " + "; ".join(
        f"{name} in {', '.join(where)}" for name, where in sorted(shared.items()))
    unused = [name for name in PROTOCOL if len(defined.get(name, ())) < 2]
    assert unused == [], f"names allowed for a protocol no two modules share any more: {unused}"


def test_no_module_imports_another_modules_private_name():
    modules = _modules()  # the packages import absolutely: a module's name is its dotted path
    imported = []
    for module, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in modules and node.module != module:
                imported += [f"{module} imports {node.module}.{alias.name}" for alias in node.names
                             if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert imported == []
