"""Accuracy on the 1-D Poisson problem (slow: run with `pytest -m slow`; the figure is in README.md)."""
import pytest

from cruxlab.measure import poisson_accuracy as accuracy


@pytest.mark.slow
def test_poisson_reaches_relative_l2_below_1e_3_in_5000_adam_epochs():
    result, _ = accuracy.train_poisson(epochs=5000, batchsize=None, seed=0, hard_boundary=False)
    assert result["relative_l2"] <= 1e-3
