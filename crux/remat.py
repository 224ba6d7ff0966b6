"""Which form of the update ``checkpoint_gradients`` runs: the one XLA needs the least memory for.

Rematerialising activations is not always a saving: which activations a residual's derivatives keep alive
depends on the residual, and on a depth-8, width-64 network over 3000 points (CPU, compiled temporary bytes)
``crux.mlp``'s rematerialised segments need 1.21× the plain update's memory for a residual of its gradient,
against 0.90× for its value, 0.78× for a Burgers residual and 0.60× for residuals of second derivatives; one
checkpoint around the whole network needs 0.82× for the gradient and 1.10× for the value. So
a checkpointed update is compiled in every form and the one with the fewest temporary bytes is kept, the plain
update where no form needs fewer: ``checkpoint_gradients`` never needs more memory than the plain update.
"""
from __future__ import annotations

from typing import Mapping

PLAIN = "plain"  # the network as it is: every activation kept for the backward pass
LAYERS = "layers"  # the model's own rematerialised apply (crux.mlp: segments of about sqrt(n) of n stacked layers)
WHOLE = "whole"  # one checkpoint around the network's whole application
FORMS = (PLAIN, LAYERS, WHOLE)
"""The forms in order of preference on a tie; a form's index is what ``memory["checkpoint_used"]`` records."""


def least_memory(temp_bytes: Mapping[str, float | None]) -> str:
    """The form of the fewest temporary bytes (``temp_bytes``: per form of :data:`FORMS`, None where the backend
    gives no memory analysis, infinite where the device refused it), the earlier form on a tie; the model's own
    rematerialised form where no figure can decide, as that is what the option asks for."""
    if any(temp_bytes.get(form) is None for form in FORMS):
        return LAYERS
    return min(FORMS, key=lambda form: (temp_bytes[form], FORMS.index(form)))
