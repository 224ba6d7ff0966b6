"""crux's Hydra pipeline: the job config's schema and its refusals, building problems and phases from it, and the
entry points crux-run (:mod:`crux.pipeline.experiment`) and crux-sweep (:mod:`crux.pipeline.sweep`).

The library (``crux`` itself) never imports this package, Hydra or MLflow; this package imports the library.
"""
