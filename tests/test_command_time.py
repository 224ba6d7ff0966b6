"""``crux-bench command``: a sweep command's time split by its parent run and its jobs' runs."""
import compileall
import sys

import pytest

from cruxlab.bench.command_time import command_parts, main, program, solver_seconds, uncached_modules


def test_a_commands_parts_add_up_to_its_wall_time_and_its_share_is_what_its_jobs_did_not_train():
    """Process from 100 to 130 s, parent run 104-128 s, two jobs of 10 s (105-115, 116-126) that trained and
    compiled 9 and 8 s: 4 s before the parent, 2 after, 4 in the parent outside the jobs."""
    sweep = {"start": 104.0, "end": 128.0, "jobs": [{"seconds": 10.0, "solver": 9.0}, {"seconds": 10.0, "solver": 8.0}]}
    parts = command_parts(100.0, 130.0, sweep)
    assert parts["before parent"] + parts["parent"] + parts["after parent"] == pytest.approx(parts["wall"]) == 30
    assert (parts["before parent"], parts["parent"], parts["after parent"]) == (4, 24, 2)
    assert parts["parent outside jobs"] == 4 and parts["outside runs"] == 10
    assert (parts["job beyond, median"], parts["job beyond, largest"]) == (1.5, 2)
    assert parts["own share"] == pytest.approx(13 / 30)


def test_a_jobs_solver_seconds_count_its_gradient_draws_and_nothing_else():
    metrics = {"run_seconds": 2.0, "compile_seconds": 1.0, "gradient_noise/run_seconds": 0.5,
               "gradient_noise/compile_seconds": 0.25, "final_loss": 100.0}
    assert solver_seconds(metrics) == 3.75


def test_the_command_is_asked_for_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--repeats", "2"])
    assert ended.value.code == 2
    assert "give the command to measure, e.g. crux-bench command crux-sweep" in capsys.readouterr().err


def test_a_console_script_of_crux_runs_with_this_python_as_its_script_would():
    """On a machine where crux is installed with ``pip --target`` its scripts are on no PATH: the bench starts
    them itself."""
    command = program("crux-sweep")
    assert command[:2] == [sys.executable, "-c"]
    assert "sys.argv[0] = 'crux-sweep'; from cruxlab.commands.sweep import main; sys.exit(main())" in command[2]
    assert program("no-such-program-here") == ["no-such-program-here"]


def test_the_modules_each_command_compiles_are_those_without_bytecode_for_their_source_as_it_is(tmp_path,
                                                                                                 monkeypatch):
    package = tmp_path / "made_up_package"
    package.mkdir()
    for name in ("__init__", "first", "second"):
        (package / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert uncached_modules(("made_up_package",)) == (3, 3)
    assert compileall.compile_dir(str(package), quiet=1)
    assert uncached_modules(("made_up_package",)) == (0, 3)
    (package / "second.py").write_text("VALUE = 22\n")  # edited since: its bytecode is stale
    assert uncached_modules(("made_up_package",)) == (1, 3)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    if not sys.flags.dont_write_bytecode:  # Python writes it: the first command does, for the others
        assert uncached_modules(("made_up_package",)) == (0, 3)
