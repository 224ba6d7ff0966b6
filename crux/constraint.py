"""A constraint: a pointwise residual, the collocation points it is enforced on, and its weight."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

Residual = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Constraint:
    """Loss ``weight * mean(residual(net, x)**2)`` over ``points`` (vector residuals: mean over components too).

    ``residual(net, x)`` sees one point ``x`` of shape ``(d,)``; ``net.u(x)`` evaluates model ``u``.
    Points are kept on the host as float32 ``(N, d)``; a 1-D array is read as ``(N, 1)``.
    """

    name: str
    residual: Residual
    points: np.ndarray = field(repr=False)
    weight: float = 1.0

    def __post_init__(self):
        if not callable(self.residual):
            raise TypeError(f"Constraint '{self.name}': residual must be a function (net, x) -> residual")
        points = np.asarray(self.points, dtype=np.float32)
        if points.ndim == 1:
            points = points[:, None]
        if points.ndim != 2 or points.shape[0] == 0:
            raise ValueError(f"Constraint '{self.name}': points must be a non-empty (N, d) array, "
                             f"got shape {np.shape(self.points)}")
        if not np.isfinite(points).all():
            bad = int(np.argwhere(~np.isfinite(points))[0][0])
            raise ValueError(f"Constraint '{self.name}': points contain NaN or inf (first at row {bad}); "
                             f"remove or fix them before building the solver")
        if not np.isfinite(self.weight) or self.weight < 0:
            raise ValueError(f"Constraint '{self.name}': weight must be a finite number >= 0, got {self.weight}")
        object.__setattr__(self, "points", points)

    @property
    def size(self) -> int:
        return self.points.shape[0]
