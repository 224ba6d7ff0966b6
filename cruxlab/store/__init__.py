"""The MLflow layout crux's runs are written in and read back from (docs/CONTRACT.md): its names
(:mod:`~cruxlab.store.contract`), where runs go and the store opened (:mod:`~cruxlab.store.connection`), histories
(:mod:`~cruxlab.store.history`), params (:mod:`~cruxlab.store.params`) and the trained networks as an MLflow
model (:mod:`~cruxlab.store.model`) as written, what the MLflow UI shows
first (:mod:`~cruxlab.store.descriptions`), a store that is away waited for (:mod:`~cruxlab.store.faults`) and
credentials kept out of sight (:mod:`~cruxlab.store.secrets`). Imports nothing of the job's config or runtime."""
