"""crux's Hydra pipeline: the job config's schema and its refusals, building problems and phases from it, and the
bands a paired timing is judged with. The commands crux-run and crux-sweep (:mod:`cruxlab.commands`) run jobs from it.

The library (``crux`` itself) never imports this package, Hydra or MLflow; this package imports the library.
"""
