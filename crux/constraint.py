"""A constraint: a pointwise residual, the collocation points it is enforced on, its weight, and its loss."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from crux import remat
from crux.failures import raised_at, shown_path
from crux.model import Model, ShapeMismatch
from crux.numbers import is_rate


Residual = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Constraint:
    """A residual enforced on collocation points: loss ``weight * mean(residual(net, x)**2)`` over the points of
    an update (for a vector residual, the mean runs over its components too); a solver's total loss is the sum
    over its constraints. Frozen: build another to change its points.

    crux vectorises the residual over the points itself, so a residual is written for one point, as the
    equation reads. The shape of what it returns is checked when a solver first traces it (``solve()``,
    :attr:`crux.Crux.reach`), before any training.

    Args:
        name: the constraint's name, unique among a solver's constraints (its loss history is ``loss/<name>``).
        residual: ``residual(net, x)``: at one point ``x`` of shape ``(d,)``, a scalar, or a vector of at most
            :data:`RESIDUAL_COMPONENTS` components (one per equation of a system); ``net.u(x)`` (or
            ``net["u"](x)``) evaluates the solver's model ``"u"`` at one point of its ``in_dim`` coordinates.
        points: ``(N, d)`` real coordinates, kept on the host as a float32 copy that cannot be written (a 1-D
            array is read as ``(N, 1)``): changing the array given later changes nothing.
        weight: the loss's factor, a finite number ``>= 0``.

    Raises:
        TypeError: ``name`` is not a non-empty string, or ``residual`` is not a function of two arguments.
        ValueError: ``points`` is not a non-empty ``(N, d)`` array of real numbers or holds NaN or inf (the first
            bad row is named); ``weight`` is not a finite number ``>= 0``.
    """

    name: str
    residual: Residual
    points: np.ndarray = field(repr=False)
    weight: float = 1.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Constraint name must be a non-empty string, got {self.name!r}")
        if not callable(self.residual):
            raise TypeError(f"Constraint '{self.name}': residual must be a function (net, x) -> residual")
        try:
            inspect.signature(self.residual).bind(None, None)
        except TypeError:
            raise TypeError(f"Constraint '{self.name}': residual must take two arguments, residual(net, x) (net.u(x) "
                            f"is model 'u' at the point x), got one of signature "
                            f"{inspect.signature(self.residual)}") from None
        except ValueError:  # no signature to read (a builtin): its call says
            pass
        if np.iscomplexobj(self.points):
            raise ValueError(f"Constraint '{self.name}': points must be real coordinates, got complex ones")
        try:
            points = np.array(self.points, dtype=np.float32)  # a copy: the caller's array may change later
        except (TypeError, ValueError) as error:
            raise ValueError(f"Constraint '{self.name}': points must be an (N, d) array of numbers ({error})") from None
        if points.ndim == 1:
            points = points[:, None]
        if points.ndim != 2 or points.shape[0] == 0 or points.shape[1] == 0:
            raise ValueError(f"Constraint '{self.name}': points must be a non-empty (N, d) array with d >= 1, "
                             f"got shape {np.shape(self.points)}")
        bad = _first_non_finite_row(points)
        if bad is not None:
            raise ValueError(f"Constraint '{self.name}': points contain NaN or inf (first at row {bad}); "
                             f"remove or fix them before building the solver")
        if not is_rate(self.weight):
            raise ValueError(f"Constraint '{self.name}': weight must be a finite number >= 0, got {self.weight!r}")
        points.flags.writeable = False
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "weight", float(self.weight))

    @property
    def size(self) -> int:
        """``N``: the constraint's points."""
        return self.points.shape[0]


CHECKED_ROWS = 2 ** 22  # rows checked for NaN and inf at once: a point set near the host's memory gets no mask of
# its own size beside it


def _first_non_finite_row(points: np.ndarray) -> int | None:
    """The first row of ``points`` with a NaN or inf, None where there is none. A block's maximum and minimum are
    finite exactly where every value is (NumPy's max and min propagate NaN): two reductions that make no mask,
    several times faster than one, which is made only for a block that holds a non-finite value."""
    for start in range(0, len(points), CHECKED_ROWS):
        block = points[start:start + CHECKED_ROWS]
        if block.size and not (np.isfinite(block.max()) and np.isfinite(block.min())):
            return start + int(np.argmin(np.isfinite(block).all(axis=1)))
    return None


class Nets:
    """What a residual sees as ``net``: ``net.u(x)`` (or ``net["u"](x)``) evaluates model ``u`` at one point."""

    def __init__(self, models: dict[str, Model], params: dict[str, Any], form: str = remat.PLAIN):
        self._models, self._params, self._form = models, params, form

    def __getitem__(self, name: str) -> Callable[[jax.Array], jax.Array]:
        if name not in self._models:
            raise KeyError(f"residual asked for model '{name}', but the solver has models {sorted(self._models)}")
        model, params = self._models[name], self._params[name]

        def evaluate(x: jax.Array) -> jax.Array:
            try:
                return model.pointwise(params, x, self._form)
            except ShapeMismatch as error:
                raise ShapeMismatch(f"model '{name}' {error}") from None
        return evaluate

    def __getattr__(self, name: str) -> Callable[[jax.Array], jax.Array]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]


def constraint_loss(constraint: Constraint, models: dict[str, Model], params: dict[str, Any],
                    points: jax.Array, form: str = remat.PLAIN, slot_weights: jax.Array | None = None) -> jax.Array:
    """A constraint's loss on a batch: ``weight * mean(residual**2)``.

    Args:
        constraint: the constraint, its residual and weight.
        models: ``{name: crux.Model}``, the networks the residual calls.
        params: ``{name: parameters}``, the parameters to apply (traced, in a compiled update).
        points: the batch, shape ``(B, d)``.
        form: the rematerialisation form the networks are applied in (:mod:`crux.remat`).
        slot_weights: shape ``(B,)``, for a micro-batch whose slots repeat points
            (:meth:`crux.batching.PointStream.slot_weights`): the mean over the points becomes the sum of each
            point's mean squared residual times its slot's weight. None: the plain mean.

    Returns:
        The loss, a scalar.
    """
    net = Nets(models, params, form)
    squares = jnp.square(jax.vmap(lambda x: constraint.residual(net, x))(points))
    if slot_weights is None:
        return constraint.weight * jnp.mean(squares)
    per_point = jnp.mean(squares, axis=tuple(range(1, squares.ndim))) if squares.ndim > 1 else squares
    return constraint.weight * jnp.sum(slot_weights * per_point)


RESIDUAL_COMPONENTS = 16
"""The most components a vector residual may have (one per equation of a system); a longer vector, or an
array of two or more axes, is almost always a residual evaluated over many points instead of one."""


TRACED_AS_A_NUMBER = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                      jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)
"""JAX's errors where a residual treats a traced value as a number (``if x[0] > 0.5``, ``np.sin(x)``)."""


class _NotAValue(Exception):
    """A residual returned something JAX cannot trace (a function: ``net.u`` instead of ``net.u(x)``)."""


def checked_reach(constraint: Constraint, models: dict[str, Model], params: dict[str, Any]) -> set[str]:
    """The models whose parameters enter ``constraint``'s residual, from one trace of it at one point (no
    compute).

    Args:
        constraint: the constraint whose residual is traced.
        models: ``{name: crux.Model}``.
        params: ``{name: parameters}`` of every model.

    Returns:
        The names of the models the residual reaches.

    Raises:
        ValueError: the residual returns anything but one real floating-point array, a scalar or a vector of 1
            to :data:`RESIDUAL_COMPONENTS` components (naming its function and what it returned), or evaluates a
            model at a point, or gets a value from it, of another shape than the model's ``in_dim`` and
            ``out_dim``.
        TypeError, ValueError: the residual's own, where it fails when traced, with the constraint named.
    """
    names = sorted(params)  # make_jaxpr flattens the dict in sorted-key order
    code = getattr(constraint.residual, "__code__", None)
    where = f" ({shown_path(code.co_filename)}:{code.co_firstlineno})" if code else ""

    def residual(p: dict[str, Any], x: jax.Array) -> Any:
        value = constraint.residual(Nets(models, p), x)
        if callable(value):  # a function is no value to trace: name it here, not where JAX meets it
            raise _NotAValue(value)
        return value

    try:
        closed, returned = jax.make_jaxpr(residual, return_shape=True)(params, constraint.points[0])
    except ShapeMismatch as error:
        at = f" ({raised_at(error)})" if raised_at(error) else where  # the line that evaluated the model
        one_point = (" (a 1-D points array is read as N points of one coordinate: one point of d coordinates "
                     "is written [[x1, ..., xd]])" if constraint.points.shape[1] == 1 else "")
        raise ValueError(f"Constraint '{constraint.name}': {error}{at}; the constraint's points have "
                         f"{constraint.points.shape[1]} coordinates{one_point}. A model takes one point of its in_dim "
                         f"coordinates (a slice of x where the points hold more) and returns out_dim values") from None
    except _NotAValue as error:
        returned = error.args[0]
    except (TypeError, ValueError) as error:  # JAX's own words, with the constraint and what to write instead
        at = f" ({raised_at(error)})" if raised_at(error) else where
        hint = (": a residual is traced, not run on numbers; write a condition on x or on a model's value with "
                "jnp.where, and use jnp, not np, on them" if isinstance(error, TRACED_AS_A_NUMBER) else "")
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise (TypeError if isinstance(error, TypeError) else ValueError)(
            f"Constraint '{constraint.name}': its residual{at} fails at one point x of shape "
            f"{constraint.points.shape[1:]}{hint}. {type(error).__name__}: {first}") from error
    if not isinstance(returned, jax.ShapeDtypeStruct):
        kind = ("a function (net.u is the model; net.u(x) its value at x)" if callable(returned) else
                "None" if returned is None else f"a {type(returned).__name__}")
        raise ValueError(f"Constraint '{constraint.name}': its residual{where} returns {kind}, not an array; "
                         f"return one array per point: a scalar, or a vector of the equations' residuals "
                         f"(e.g. jnp.stack([r1, r2]) instead of (r1, r2))")
    shape = returned.shape
    if not (len(shape) == 0 or (len(shape) == 1 and 1 <= shape[0] <= RESIDUAL_COMPONENTS)):
        raise ValueError(f"Constraint '{constraint.name}': its residual{where} returns shape {shape} at one point x "
                         f"of shape {constraint.points.shape[1:]}; a residual returns a scalar per point, or a vector "
                         f"of 1 to {RESIDUAL_COMPONENTS} components (one per equation): did it use all the "
                         f"points, or an array of them, instead of x?")
    if not jnp.issubdtype(returned.dtype, jnp.floating):  # a comparison, an integer or a complex value
        raise ValueError(f"Constraint '{constraint.name}': its residual{where} returns {returned.dtype} values; a "
                         f"residual is real floating point (its square is the loss, its gradient trains the models)")
    used = {id(v) for eqn in closed.jaxpr.eqns for v in eqn.invars} | {id(v) for v in closed.jaxpr.outvars}
    reached, position = set(), 0
    for name in names:
        count = len(jax.tree.leaves(params[name]))
        if any(id(v) in used for v in closed.jaxpr.invars[position:position + count]):
            reached.add(name)
        position += count
    return reached
