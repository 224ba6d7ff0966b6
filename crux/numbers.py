"""What the building blocks accept as a number: any real scalar a user may hold (Python, NumPy or JAX), never a
``bool``, a string, ``None`` or an array of several values."""
from __future__ import annotations

from typing import Any

import numpy as np


def is_real_scalar(value: Any) -> bool:
    """Whether ``value`` is one real number.

    Args:
        value: anything.

    Returns:
        True for an int or a float of any library, or a 0-d array of one; False for a ``bool``.
    """
    return not isinstance(value, bool) and np.ndim(value) == 0 and np.asarray(value).dtype.kind in "iuf"


def is_rate(value: Any) -> bool:
    """Whether ``value`` can be a weight or a learning rate.

    Args:
        value: anything.

    Returns:
        True for a real number (:func:`is_real_scalar`), finite and ``>= 0``.
    """
    return is_real_scalar(value) and bool(np.isfinite(value)) and value >= 0
