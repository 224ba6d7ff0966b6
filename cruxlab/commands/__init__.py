"""crux's commands: crux-run (:mod:`cruxlab.commands.experiment`) and crux-sweep (:mod:`cruxlab.commands.sweep`), thin
over the pipeline (:mod:`cruxlab.config`), the writer (:mod:`cruxlab.runtime`) and the backends (:mod:`cruxlab.backends`).
crux-report's is :mod:`cruxlab.report.cli`. Nothing in crux imports this package."""
