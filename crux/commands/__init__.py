"""crux's commands: crux-run (:mod:`crux.commands.experiment`) and crux-sweep (:mod:`crux.commands.sweep`), thin
over the pipeline (:mod:`crux.pipeline`), the writer (:mod:`crux.tracking`) and the backends (:mod:`crux.backends`).
crux-report's is :mod:`crux.report.cli`. Nothing in crux imports this package."""
