"""Built-in problems with exact solutions, for configs, tests and benchmarks."""
from crux.problems.heat import heat1d
from crux.problems.poisson import mixed_poisson1d, poisson1d, poisson_cube
from crux.problems.problem import Problem

__all__ = ["Problem", "heat1d", "mixed_poisson1d", "poisson1d", "poisson_cube"]
