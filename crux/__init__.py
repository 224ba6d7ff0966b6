"""crux: physics-informed neural networks in JAX, with every training option real and proven.

    u = crux.mlp(1, 1, hidden=(64, 64, 64))
    u.optimizer(optax.adam).scale(crux.lrs(1e-3))
    solver = crux.Crux([crux.Constraint("pde", pde, points=x)], models={"u": u})
    solver.solve(epochs=5000, batchsize=128).plot("history.png")
"""
from crux import compilation_cache, problems
from crux.constraint import Constraint
from crux.derivatives import grad, hessian, laplacian, partial
from crux.model import Model, mlp
from crux.options import SolveOptions
from crux.params_file import load_params, save_params
from crux.schedules import Schedule, lrs
from crux.solver import Crux
from crux.stats import Statistics

__all__ = ["Constraint", "Crux", "Model", "Schedule", "SolveOptions", "Statistics", "grad", "hessian", "laplacian", "load_params", "lrs",
           "mlp", "partial", "problems", "save_params"]
__version__ = "0.1.0"

compilation_cache.use_default_cache()  # before anything of crux compiles: a model's initialisation, a solve()
