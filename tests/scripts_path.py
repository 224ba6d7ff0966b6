"""Import the project's scripts/ as modules in tests."""
import importlib.util
import pathlib
import sys

_SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # what dataclasses look a class's module up in
    spec.loader.exec_module(module)
    return module


accuracy = _load("accuracy")
calibrate = _load("calibrate")
bench = _load("bench")
function_accuracy = _load("function_accuracy")
memory_at_scale = _load("memory_at_scale")
measure_tracking = _load("measure_tracking")  # load_test reads its timing files
load_test = _load("load_test")
capacity = _load("capacity")
