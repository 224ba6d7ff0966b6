"""What a sweep's repeat job pays for its executable: jobs built one after another in this process, each
with a new problem and solver, as Hydra's basic launcher runs a sweep.

    python scripts/measure_repeat_jobs.py [--rounds 9] [SETTING ...]   # default: the accumulation sweep's

Each round runs every setting twice, interleaved: once as a sweep does (the executables of the process's
earlier jobs there to reuse, ``crux.executables``) and once with them cleared, which is what a repeat job
paid before: trace, lower, and load the executable from the persistent cache. Prints the median of each
job's ``compile_seconds`` over the rounds after the first (which compiles, or fills the persistent cache).
A setting is one group of overrides in quotes, e.g. ``"memory=b8_acc4 solver.inner_steps=5"``.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics

import jax
from hydra import compose, initialize_config_module

from crux import executables
from cruxlab import config
from cruxlab.commands.experiment import train
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime.compilation_cache import use_compilation_cache

COMMON = "optimizer=sgd problem.n_interior=1024 model.width=32 solver.epochs=20"  # accumulation.yaml, shorter
SETTINGS = ("memory=full", "memory=b8", "memory=b32", "memory=b8_acc4")
WAYS = ("shared", "cleared")


def job_compile_seconds(overrides: list[str]) -> float:
    """One job of ``crux-run overrides`` without tracking: the seconds its solve()s spent getting executables."""
    cfg = compose("config", overrides=overrides)
    problem = config.problem(cfg)
    train(problem, config.training_phases(cfg), cfg, [])
    return problem.solver().history.compile_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--common", default=COMMON, help=f"overrides for every setting (default: {COMMON!r})")
    parser.add_argument("settings", nargs="*", default=list(SETTINGS))
    args = parser.parse_args()
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        use_compilation_cache(compose("config", overrides=args.common.split()).jax.compilation_cache_dir)
        seconds = {(setting, way): [] for setting in args.settings for way in WAYS}
        for round_ in range(args.rounds):
            for setting in args.settings:
                for way in WAYS:
                    with executables.set_aside() if way == "cleared" else contextlib.nullcontext():
                        spent = job_compile_seconds(args.common.split() + setting.split())
                    if round_:
                        seconds[setting, way].append(spent)
    print(f"{jax.default_backend()}, jax {jax.__version__}; medians of {args.rounds - 1} repeat jobs, seconds:")
    width = max(map(len, args.settings))
    print(f"{'setting':<{width}}  {'shared':>7}  {'cleared':>7}")
    for setting in args.settings:
        shared, cleared = (statistics.median(seconds[setting, way]) for way in WAYS)
        print(f"{setting:<{width}}  {shared:7.3f}  {cleared:7.3f}")


if __name__ == "__main__":
    main()
