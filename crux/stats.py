"""Statistics of one or more solve() calls: loss arrays, learning rates, timings, memory."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crux.options import SolveOptions


def fingerprint(params: Any) -> float:
    """The sum of squares of every parameter in ``params`` (any pytree of arrays), correctly rounded in float64.

    The squares are summed exactly and the sum rounded once, so the value depends on the parameters' values
    alone, not on their order or layout: the same parameters give the same value to the bit, and parameters that
    differ give another value except by a coincidence of their norms. Finite parameters of float32 (or of a
    narrower float, which float32 holds exactly) are summed in integers, by binary exponent, with a few array
    operations; others by ``math.fsum`` of their squares in float64 (each rounded once).

    Args:
        params: any pytree of arrays (host or device); an empty one gives 0.0.

    Returns:
        The sum of squares, a float64 rounded once (inf or NaN where an entry is).
    """
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(params)]
    if not leaves:
        return 0.0
    if all(leaf.dtype in _WITHIN_FLOAT32 for leaf in leaves):
        values = np.concatenate([leaf.astype(np.float32, copy=False).ravel() for leaf in leaves])
        if np.isfinite(values).all():
            return _float32_square_sum(values)
    return math.fsum(np.square(np.concatenate([leaf.astype(np.float64).ravel() for leaf in leaves])).tolist())


class PendingFingerprint:
    """:func:`fingerprint` of ``params``, taken once, when first asked for (:meth:`value`), the arrays then let go.

    A solve() leaves its parameters' fingerprints to be taken while the device runs the next solve()'s first
    calls, or by whoever reads ``Statistics.fingerprints`` first: taken at its end, reading the parameters back
    and summing their squares cost 0.26 ms of each solve() on a TPU v5e's host (docs/BENCHMARK.md).
    """

    __slots__ = ("_params", "_value")

    def __init__(self, params: Any):
        self._params, self._value = params, math.nan

    def value(self) -> float:
        """The fingerprint, taken at the first call."""
        if self._params is not None:
            self._value, self._params = fingerprint(self._params), None
        return self._value


class _Fingerprints:
    """``Statistics.fingerprints``: pairs of floats, where a solve() may have set pending ones
    (:class:`PendingFingerprint`), taken (and kept) when the pairs are read."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attribute = "_" + name

    def __get__(self, statistics: Any, owner: type | None = None) -> Any:
        if statistics is None:  # the dataclass's default
            return ()
        pairs = getattr(statistics, self._attribute)
        if any(isinstance(f, PendingFingerprint) for pair in pairs for f in pair):
            pairs[:] = [tuple(f.value() if isinstance(f, PendingFingerprint) else f for f in pair) for pair in pairs]
        return pairs

    def __set__(self, statistics: Any, pairs: Any) -> None:
        setattr(statistics, self._attribute, list(pairs))


_WITHIN_FLOAT32 = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(jnp.bfloat16)}
_BINCOUNT_EXACT = 2 ** 29  # terms below 2**24 whose float64 sum (bincount's) stays below 2**53, exact


def _float32_square_sum(values: np.ndarray) -> float:
    """The correctly rounded sum of the squares of finite float32 ``values``.

    ``frexp`` writes a float32 as ``m * 2**(e - 24)`` with ``m < 2**24`` an integer and ``e`` from -148 up, so its
    square is ``m**2 * 2**(2e - 48)``: an integer below 2**48 at one of 277 scales. The integers are summed per
    scale, split in halves of 24 bits that float64 sums exactly, then the scales are added as Python integers
    and the total divided by a power of two (Python's integer division rounds correctly).
    """
    fraction, exponent = np.frexp(values)
    integer = fraction.astype(np.float64) * 2.0 ** 24
    square = integer * integer
    high = np.floor(square * 2.0 ** -24)
    low = square - high * 2.0 ** 24
    scale = exponent + 148
    total = 0
    for start in range(0, len(values), _BINCOUNT_EXACT):
        part = slice(start, start + _BINCOUNT_EXACT)
        highs = np.bincount(scale[part], weights=high[part])
        lows = np.bincount(scale[part], weights=low[part])
        for e in np.flatnonzero(highs + lows):
            total += ((int(highs[e]) << 24) + int(lows[e])) << (2 * int(e))
    return total / (1 << 344)


@dataclass
class Statistics:
    """Histories with one row per epoch, and what the run cost, of one solve() call or of several joined.

    Per-call fields (``phases``, ``fingerprints``, ``precision``, ``options``) hold one entry per solve() call,
    in order, and :meth:`concat` joins them by putting the calls' lists end to end; the rows of the histories
    are joined likewise, the seconds added and the memory figures taken at their largest (the checkpoint form: the
    last call's that has one).

    Attributes:
        names: the constraints' names, in the solver's order.
        losses: ``(epochs, constraints)`` float32: each constraint's loss in each epoch (NaN where it was not
            evaluated).
        epoch: ``(epochs,)``: the solver's epoch counter, continuing across solve() calls.
        lr: ``{model: (epochs,)}``: the learning rate of each model's last update in each epoch (NaN where it was
            not trained).
        compile_seconds: seconds spent getting the compiled programs (0 where the solver had them already).
        run_seconds: wall seconds of the training loop.
        run_cpu_seconds: the process's CPU seconds (all its threads) over the same span as ``run_seconds``, which
            other processes sharing the cores do not lengthen.
        step_seconds: the time per update, measured over each synchronisation window.
        window_ends: ``(windows,)``: the epoch counter after each synchronisation window, so that window i's
            time per update covers the epochs from ``window_ends[i - 1]`` (the first row's epoch for the first)
            up to ``window_ends[i]`` (empty where not recorded: its windows are then spread evenly over the epochs).
        memory: the compiled update's ``temp_bytes``, ``argument_bytes``, ``output_bytes``, ``peak_bytes`` (the
            update's own peak, :mod:`crux.device_memory`) and, with ``checkpoint_gradients``,
            ``checkpoint_form``: the name of the form of :mod:`crux.remat` the update ran in,
            ``checkpoint_compared``: whether it was chosen by comparing every form (False: the form likely to need
            the least ran uncompared, within :data:`crux.remat.COMPARED_FROM` of the device's memory) and
            ``capacity_bytes``: that memory (:func:`crux.device_memory.capacity`).
        phases: the first epoch of each solve() call.
        fingerprints: per solve() call, the :func:`fingerprint` of the parameters its first update started from
            and of those it ended with (what the next call should start from), so that a call that starts
            anywhere else shows.
        precision: per solve() call, the matmul precision its update was compiled at (:mod:`crux.precision`).
        options: per solve() call, the :class:`crux.SolveOptions` it ran (:meth:`crux.Crux.resolve`), its
            ``epochs`` those asked for: a call stopped early has fewer rows.
    """

    names: list[str]
    losses: np.ndarray
    epoch: np.ndarray
    lr: dict[str, np.ndarray] = field(default_factory=dict)
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    run_cpu_seconds: float = 0.0
    step_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    window_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    memory: dict[str, int | str] = field(default_factory=dict)
    phases: list[int] = field(default_factory=list)
    fingerprints: list[tuple[float, float]] = _Fingerprints()  # type: ignore[assignment]
    precision: list[str] = field(default_factory=list)
    options: list[SolveOptions] = field(default_factory=list)

    @property
    def total_loss(self) -> np.ndarray:
        """``(epochs,)``: per row, the sum of the losses that were evaluated; NaN in a row with none (an epoch
        whose losses were not reported)."""
        if not self.losses.size:
            return np.zeros(0, np.float32)
        return _row_sums(self.losses)

    @property
    def final_loss(self) -> float:
        """``total_loss[-1]`` without summing every row; NaN before the first epoch."""
        return float(_row_sums(self.losses[-1:])[0]) if self.losses.size else float("nan")

    @property
    def steps(self) -> int:
        """The number of rows (epochs)."""
        return int(self.losses.shape[0])

    @property
    def median_step_seconds(self) -> float:
        """The median of ``step_seconds``; NaN without any."""
        return float(np.median(self.step_seconds)) if self.step_seconds.size else float("nan")

    def __len__(self) -> int:
        return self.steps

    def __repr__(self) -> str:
        last = f", final loss {self.final_loss:.3e}" if self.steps else ""
        return (f"Statistics({self.steps} epochs over {len(self.phases)} phase(s){last}, "
                f"compile {self.compile_seconds:.2f} s, run {self.run_seconds:.2f} s)")

    @staticmethod
    def concat(parts: list["Statistics"]) -> "Statistics":
        """Join the statistics of consecutive solve() calls (one phase each, or more).

        Args:
            parts: statistics of one solver's consecutive calls, in order.

        Returns:
            Their rows one after another, each per-call list (``phases``, ``fingerprints``, ``precision``,
            ``options``) the parts' end to end, the seconds summed, each memory figure the largest and the
            checkpoint form the last part's that has one.

        Raises:
            ValueError: ``parts`` is empty.
        """
        if not parts:
            raise ValueError("Statistics.concat needs at least one part")
        names = parts[0].names
        models = sorted({m for p in parts for m in p.lr})
        lr = {m: np.concatenate([p.lr.get(m, np.full(p.steps, np.nan, np.float32)) for p in parts])
              for m in models}
        memory: dict[str, int | str] = {}
        for p in parts:
            for k, v in p.memory.items():
                memory[k] = v if isinstance(v, str) else max(memory.get(k, 0), v)
        return Statistics(
            names=list(names),
            losses=np.concatenate([p.losses for p in parts]),
            epoch=np.concatenate([p.epoch for p in parts]),
            lr=lr,
            compile_seconds=float(sum(p.compile_seconds for p in parts)),
            run_seconds=float(sum(p.run_seconds for p in parts)),
            run_cpu_seconds=float(sum(p.run_cpu_seconds for p in parts)),
            step_seconds=np.concatenate([p.step_seconds for p in parts]),
            window_ends=np.concatenate([p.window_ends for p in parts]),
            memory=memory,
            phases=[e for p in parts for e in p.phases],
            fingerprints=[f for p in parts for f in p.fingerprints],
            precision=[q for p in parts for q in p.precision],
            options=[o for p in parts for o in p.options],
        )

    # -- persistence -------------------------------------------------------------
    def save(self, path: str | Path) -> "Statistics":
        """Write every array to one ``.npz`` file, the rest as JSON in its ``meta`` entry (each of ``options`` by
        field, ``substeps`` as lists), for :meth:`load` to read back.

        Args:
            path: the file to write (NumPy adds ``.npz`` where it lacks it).

        Returns:
            self.
        """
        arrays = {"losses": self.losses, "epoch": self.epoch, "step_seconds": self.step_seconds,
                  "window_ends": self.window_ends, "total_loss": self.total_loss}
        arrays.update({f"lr/{m}": v for m, v in self.lr.items()})
        meta = {"names": self.names, "compile_seconds": self.compile_seconds, "run_seconds": self.run_seconds,
                "run_cpu_seconds": self.run_cpu_seconds, "memory": self.memory, "phases": self.phases,
                "fingerprints": [list(f) for f in self.fingerprints], "precision": self.precision,
                "options": [dataclasses.asdict(o) for o in self.options]}
        np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
        return self

    @staticmethod
    def load(path: str | Path) -> "Statistics":
        """Read what :meth:`save` wrote.

        Args:
            path: a file :meth:`save` wrote (one from before a field existed reads as without it).

        Returns:
            The statistics, equal to those saved: ``options`` as :class:`crux.SolveOptions` again.
        """
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            lr = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("lr/")}
            return Statistics(names=meta["names"], losses=data["losses"], epoch=data["epoch"], lr=lr,
                              compile_seconds=meta["compile_seconds"], run_seconds=meta["run_seconds"],
                              run_cpu_seconds=meta.get("run_cpu_seconds", 0.0),
                              step_seconds=data["step_seconds"],
                              window_ends=data["window_ends"] if "window_ends" in data.files else np.zeros(0, np.int64),
                              memory=meta["memory"], phases=meta["phases"],
                              fingerprints=[tuple(f) for f in meta.get("fingerprints", [])],
                              precision=meta.get("precision", []),
                              options=[SolveOptions(**o) for o in meta.get("options", [])])

    # -- figure --------------------------------------------------------------------
    def plot(self, path: str | Path) -> "Statistics":
        """Save :meth:`figure` to ``path``.

        Args:
            path: the PNG file to write (110 dpi).

        Returns:
            self.
        """
        self.figure().savefig(path, dpi=110)
        return self

    def figure(self) -> Any:
        """Losses per constraint (log scale), learning rates (log scale where the positive ones span a decade or
        more: Adam at 1e-3 beside L-BFGS at 1.0 would be a flat zero on a linear axis), and the time per update
        of each synchronisation window over the epochs it covered (log scale, so that one slow window leaves the
        others readable; the median dotted); every phase after the first starts at a dashed line on every panel,
        numbered above the learning-rate panel, clear of its legend.

        Drawn on a bare figure (no pyplot state, no backend choice) with fixed margins, plain ``1e-04`` labels and
        no minor ticks on the log axes, as a job draws it once: ``tight_layout`` draws the figure twice, mathtext
        labels build their parser, and minor ticks add some 50 tick objects.

        Returns:
            A matplotlib ``Figure`` (matplotlib is imported here, not with crux).
        """
        from matplotlib.figure import Figure
        from matplotlib.ticker import LogFormatter, NullLocator

        fig = Figure(figsize=(8, 9))
        ax_loss, ax_lr, ax_time = fig.subplots(3, 1)
        fig.subplots_adjust(left=0.14, right=0.97, bottom=0.06, top=0.97, hspace=0.42)
        reported = np.isfinite(self.total_loss)  # rows of epochs with a recorded loss, joined by the lines
        ax_loss.semilogy(self.epoch[reported], self.total_loss[reported], color="k", lw=1.5, label="total")
        for j, name in enumerate(self.names):
            ax_loss.semilogy(self.epoch[reported], self.losses[reported, j], lw=1, label=name)
        ax_loss.set_ylabel("loss")
        ax_loss.legend(loc="upper right", fontsize=8)
        for m, values in self.lr.items():
            ax_lr.plot(self.epoch[np.isfinite(values)], values[np.isfinite(values)], label=m)
        ax_lr.set_ylabel("learning rate")
        if self.lr:
            ax_lr.legend(loc="upper right", fontsize=8)
        rates = np.concatenate([values[values > 0] for values in self.lr.values()] or [np.zeros(0)])
        log_axes = [ax_loss] + ([ax_lr] if rates.size and rates.max() >= 10 * rates.min() else [])
        if self.step_seconds.size:
            edges = self._window_edges()
            ax_time.stairs(self.step_seconds * 1e3, edges, baseline=None, color="C0", lw=1.2)
            median = self.median_step_seconds * 1e3
            ax_time.axhline(median, color="k", ls=":", lw=0.8)
            ax_time.text(edges[-1], median, f"median {median:.3g} ms ", ha="right", va="bottom", fontsize=8)
            if (self.step_seconds > 0).all():
                log_axes.append(ax_time)
        for ax in log_axes:
            ax.set_yscale("log", nonpositive="mask")  # a warm-up's first rate, 0, is left out, not clipped
            ax.yaxis.set_major_formatter(LogFormatter())
            ax.yaxis.set_minor_locator(NullLocator())
        for ax in (ax_loss, ax_lr, ax_time):
            ax.set_xlabel("epoch")
            for start in self.phases[1:]:
                ax.axvline(start, color="grey", ls="--", lw=0.8)
        if len(self.phases) > 1:  # above the panel: a legend inside it would hide the label under it
            for number, start in enumerate(self.phases, 1):
                ax_lr.text(start, 1.01, f" phase {number}", transform=ax_lr.get_xaxis_transform(), va="bottom",
                           fontsize=8, color="grey")
        ax_time.set_ylabel("ms per update")
        ax_time.set_title(f"time per update, each synchronisation window over its epochs; compile "
                          f"{self.compile_seconds:.2f} s, run {self.run_seconds:.2f} s", fontsize=9)
        return fig

    def _window_edges(self) -> np.ndarray:
        """The epochs that bound the synchronisation windows: where each started, then where the last ended;
        spread evenly over the rows where the windows' ends were not recorded."""
        first = float(self.epoch[0]) if self.epoch.size else 0.0
        if self.window_ends.size == self.step_seconds.size:
            return np.concatenate([[first], self.window_ends]).astype(np.float64)
        return np.linspace(first, first + max(self.steps, 1), self.step_seconds.size + 1)


def _row_sums(losses: np.ndarray) -> np.ndarray:
    """Per row of ``losses``, the sum of its evaluated (non-NaN) entries; NaN in a row with none."""
    evaluated = ~np.all(np.isnan(losses), axis=1)
    return np.where(evaluated, np.nansum(losses, axis=1), np.float32(np.nan)).astype(losses.dtype)
