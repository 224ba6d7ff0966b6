"""What a job prints when it ends, and how a store's address is shown."""
from __future__ import annotations

import pytest

from crux.tracking.job import outcome_line
from crux.tracking.secrets import masked
from crux_testing import poisson


@pytest.mark.parametrize("uri, shown", [
    ("postgresql://crux:s3cret@db.example:5432/mlflow", "postgresql://crux:***@db.example:5432/mlflow"),
    ("http://alice:p%40ss@tracking.example/", "http://alice:***@tracking.example/"),
    ("http://tracking.example:5000", "http://tracking.example:5000"),
    ("sqlite:////home/me/mlflow.db", "sqlite:////home/me/mlflow.db"),
])
def test_a_password_in_a_store_address_is_masked(uri, shown):
    assert masked(uri) == shown


def test_the_last_line_gives_the_final_losses_the_errors_and_the_run():
    problem = poisson(n=16, hidden=(4,))
    stats = problem.solver().solve(3)
    line = outcome_line(stats, {"u": 0.25}, "abc123", "sqlite:///x.db")
    total, (pde, bc) = stats.total_loss[-1], stats.losses[-1]
    assert line == (f"final loss {total:.4g} ({stats.names[0]} {pde:.4g}, {stats.names[1]} {bc:.4g}), "
                    f"error/u 0.25; run abc123 in sqlite:///x.db")
