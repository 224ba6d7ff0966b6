"""``crux-sweep NAME [overrides]``: run ``sweeps/NAME.yaml`` as a multirun; the overrides apply to every job.

    crux-sweep --list
    crux-sweep accumulation                    # as the sweep file says
    crux-sweep accumulation solver.epochs=30   # shorter, every job
    crux-sweep offload hydra/launcher=joblib   # jobs in parallel processes

``sweeps/`` is a Hydra config group put on the search path by its absolute
location (the package's, not the working directory's); each file starts with
``# @package _global_`` (without it Hydra silently runs one job, FACTS.md).
"""
from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from crux.config import PROJECT_ROOT

SWEEPS = PROJECT_ROOT / "sweeps"


def available() -> dict[str, str]:
    """Sweep name -> its claim."""
    return {path.stem: str(OmegaConf.load(path).get("claim", "")) for path in sorted(SWEEPS.glob("*.yaml"))}


def main(argv: list[str] | None = None) -> None:
    """The console script; ``argv`` defaults to the command line. Hands the multirun to ``crux-run``'s main."""
    parser = argparse.ArgumentParser(prog="crux-sweep", description="Run sweeps/NAME.yaml as a Hydra multirun "
                                     "logged to MLflow; the overrides apply to every job.",
                                     epilog="Results: MLflow experiment NAME (see `mlflow ui`), Hydra outputs in "
                                            "./multirun/.")
    parser.add_argument("--list", action="store_true", help="name the sweeps and their claims")
    parser.add_argument("name", nargs="?", help="a file of sweeps/ without .yaml")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides for every job")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sweeps = available()
    if args.list:
        width = max(map(len, sweeps))
        for name, claim in sweeps.items():
            print(f"{name:<{width}}  {claim}")
        return
    if args.name not in sweeps:
        problem = f"unknown sweep {args.name!r}" if args.name else "name a sweep"
        parser.error(f"{problem}; choose one of {', '.join(sweeps)} (see --list)")
    from crux import experiment  # after the argument checks: importing JAX and Hydra takes seconds

    sys.argv = [sys.argv[0], "--multirun", f"hydra.searchpath=[file://{PROJECT_ROOT}]", f"+sweeps={args.name}",
                *args.overrides]
    experiment.main()


if __name__ == "__main__":
    main()
