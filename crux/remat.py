"""Which form of the update ``checkpoint_gradients`` runs: the one XLA needs the least memory for.

Rematerialising activations is not always a saving: which activations a residual's derivatives keep alive
depends on the residual, and on a depth-8, width-64 network over 3000 points (CPU, compiled temporary bytes)
``crux.mlp``'s rematerialised segments need 1.21× the plain update's memory for a residual of its gradient,
against 0.90× for its value, 0.78× for a Burgers residual and 0.60× for residuals of second derivatives; one
checkpoint around the whole network needs 0.82× for the gradient and 1.10× for the value.

How the segments are applied matters as much, and which way is smaller depends on the device: the compiled
temporary bytes of the update of the 1-D Poisson problem (Laplacian residual) on 16 hidden layers, 2026-12-06,
jax 0.10.2, commit ``3852cf0`` (on the chip, plain and whole at ``bebde04``: the same programs), on one TPU v5e
chip and a 2-core Intel Xeon:

============================  ==========================  ===========================
form                          TPU v5e, width 256,         CPU, width 64,
                              131,072 points              4,096 points
============================  ==========================  ===========================
plain                         6.45 GB                     99.4 MB
layers (segments scanned)     5.79 GB (0.90×)             41.2 MB (0.41×)
whole                         6.72 GB (1.04×)             84.9 MB (0.85×)
unrolled (segments unrolled)  3.11 GB (0.48×)             88.9 MB (0.89×)
============================  ==========================  ===========================

So which form needs the least memory is known only from XLA's compiles, and comparing the forms costs compiles:
measured side by side with a compile that spends little on the machine code (on a CPU: LLVM at its lowest level;
:mod:`crux.executables`), a first ``solve()`` with the comparison compiled 2.6-3.6× the plain update's CPU
seconds, without it 1.15-1.32× (docs/BENCHMARK.md, ``crux-bench compile``, 2026-12-07: Adam and L-BFGS, every
memory option). The comparison is made only where memory decides: the form likely to need the least
(:func:`likely_least`) is compiled in full first, and where its compiled bytes (temporaries, arguments and outputs)
are at most :data:`COMPARED_FROM` of the memory the device has for the program (:func:`crux.device_memory.capacity`:
the device's limit, a CPU's host memory, or a budget held to) it runs, no other form compiled: another form shares
its arguments and outputs, so comparing could save at most its temporaries, under that share of the device. Above
it (or where XLA refuses it, or a figure is unknown) every other form is measured, side by side, and the form of the
fewest temporary bytes runs (compiled in full after, where it is not the one guessed), the plain update where no
form needs fewer: there ``checkpoint_gradients`` never needs more memory than the plain update. Below it the form
kept may need more than the plain update would (as the segments do for the gradient's residual above), within that
share of the device. A solve records which way its form was kept, ``memory["checkpoint_compared"]``, and the
device's bytes it was held against, ``memory["capacity_bytes"]``. Within :func:`forms_compared` the forms are
compared whatever the device's memory: where the question is what the option saves (a claim's sweep), not what a
first ``solve()`` compiles.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Collection, Iterator, Mapping

PLAIN = "plain"  # the network as it is: every activation kept for the backward pass
LAYERS = "layers"  # the model's own rematerialised apply (crux.mlp: a lax.scan over segments of about sqrt(n) layers)
WHOLE = "whole"  # one checkpoint around the network's whole application
UNROLLED = "unrolled"  # the model's own rematerialised segments applied one after another, no loop (crux.mlp)
FORMS = (PLAIN, LAYERS, WHOLE, UNROLLED)
"""The forms in order of preference on a tie. A solve records the form it ran by its name
(``memory["checkpoint_form"]``), so reordering them changes no record."""


COMPARED_FROM = 1 / 4
"""The share of the device's memory above which the likely form's compiled bytes make a solve compare the forms."""
_ALWAYS_COMPARED: contextvars.ContextVar[bool] = contextvars.ContextVar("crux_forms_compared", default=False)


@contextlib.contextmanager
def forms_compared() -> Iterator[None]:
    """Solves with ``checkpoint_gradients`` meanwhile (in this thread) compare every form and run the least, as where
    memory decides, whatever share of the device's memory the update needs."""
    token = _ALWAYS_COMPARED.set(True)
    try:
        yield
    finally:
        _ALWAYS_COMPARED.reset(token)


def always_compared() -> bool:
    """Whether solves compare every form whatever the device's memory: within :func:`forms_compared`."""
    return _ALWAYS_COMPARED.get()


def compared(kept_bytes: int | None, capacity: int | None) -> bool:
    """Whether a solve compares the forms, or runs the form likely to need the least without comparing.

    Args:
        kept_bytes: the likely form's compiled bytes (temporaries, arguments and outputs), None where unknown.
        capacity: the bytes the device has for the program (:func:`crux.device_memory.capacity`), None where unknown.

    Returns:
        True within :func:`forms_compared`, where ``kept_bytes`` is above :data:`COMPARED_FROM` of ``capacity``, or
        where either is unknown.
    """
    return always_compared() or kept_bytes is None or capacity is None or kept_bytes > COMPARED_FROM * capacity


def least_memory(temp_bytes: Mapping[str, float | None]) -> str:
    """The form a solve() with ``checkpoint_gradients`` runs, from the forms it compiled.

    Args:
        temp_bytes: ``{form of FORMS: its temporary bytes}`` per form compiled, None where the backend gives no
            memory analysis; at least one form.

    Returns:
        The form of the fewest temporary bytes, the earlier of :data:`FORMS` on a tie; where a figure is missing,
        the first rematerialising form given (what the option asks for), else the one form given.
    """
    compiled = [form for form in FORMS if form in temp_bytes]
    if any(temp_bytes[form] is None for form in compiled):
        return next((form for form in compiled if form != PLAIN), compiled[0])
    return min(compiled, key=lambda form: (temp_bytes[form], FORMS.index(form)))


def likely_least(forms: Collection[str], backend: str) -> str:
    """The form of ``forms`` likely to need the fewest temporary bytes, after the measurements above: a model's own
    segments where they make two programs (several whole segments in a stack), scanned on a CPU and unrolled
    elsewhere; else one checkpoint around the whole network (a shallow network's segments are a few layers, whose
    recomputation keeps about as much alive as the plain update); plain where nothing rematerialises.

    Args:
        forms: the forms of :data:`FORMS` the update has (at least plain).
        backend: the backend it compiles for (``jax.default_backend()``).

    Returns:
        One of ``forms``.
    """
    if UNROLLED in forms:
        return LAYERS if backend == "cpu" else UNROLLED
    return WHOLE if WHOLE in forms else next(iter(forms))
