"""The jNO backend (``backend=jno``): crux's built-in problems, or a problem of one's own written in jNO's terms,
trained through jNO's own API.

Importing this package imports jNO (PyPI ``jax-numerical-operators``, the ``jno`` extra);
crux imports it only when a job chooses ``backend=jno``. :mod:`.problems` builds the
built-in problems, :mod:`.own` a user's (:class:`OwnProblem`), :mod:`.training` runs
``solve()`` and reads back what jNO reports, :mod:`.pipeline_job` is the pipeline job that logs
it all in crux's MLflow layout.
"""
from cruxlab.backends.jno.own import OwnProblem

Problem = OwnProblem  # the name docs/usage.md gave users before OwnProblem

__all__ = ["OwnProblem", "Problem"]
