"""The lab's measurements beyond the claims' sweeps, each a command line (``python -m cruxlab.measure.NAME``, or
``scripts/NAME.py``) and the functions its tests call.

``poisson_accuracy`` (the README problem's relative L2 error), ``function_accuracy`` (a backend's float32
functions against float64), ``calibration`` (how often the claim checks fail correct code and catch planted
defects), ``capacity_verdicts`` (each memory option where the run without it does not fit, and its verdict),
``memory_at_scale`` (checkpoint_gradients and offload_data at stated sizes), ``tracking_timer`` (the Hydra
callback that times crux's tracking inside a job), ``tracking_share`` (what tracking adds to a sweep's jobs) and
``load_test`` (sweeps at once into one store, every run counted back).
"""
