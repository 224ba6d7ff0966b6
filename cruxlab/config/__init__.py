"""The job's config for crux-run and crux-sweep: its schema (:mod:`~cruxlab.config.schema`), what a composed config
builds (the problem and the training phases: :mod:`~cruxlab.config.building`), what in it no run could use
(:mod:`~cruxlab.config.checks`), and beside them what a field accepts (:mod:`~cruxlab.config.ranges`), the keys
the schema lacks (:mod:`~cruxlab.config.keys`), what a backend can run (:mod:`~cruxlab.config.backend_choice`),
every refusal of a job's config (:mod:`~cruxlab.config.refusals`), what a run's config sets
(:mod:`~cruxlab.config.settings`) and docs/config.md (:mod:`~cruxlab.config.reference`). Importing it registers
the schema with Hydra; its names are those of the first three modules.

The library (``crux`` itself) never imports this package, Hydra or MLflow; this package imports the library.
"""
from cruxlab.config.building import (PROBLEM_ARGUMENTS, Phase, build_problem, effective_settings,
                                     failed_import, import_from_working_directory, problem, problem_call,
                                     problem_fields, problem_function, training_phases, unknown_field)
from cruxlab.config.checks import (UnbuiltProblem, build_faults, builds_problem, built_problem, option_refusals,
                                   out_of_range, overrides_without, problem_faults, timing_refusals)
from cruxlab.config.schema import (BACKENDS, CONFIG_PACKAGE, INVOCATION, OPTIMIZERS, PROBLEMS, SCHEDULES, SWEEP_KEYS,
                                   TIMED_OPTIONS, TRACKING_KEYS, AdamConfig, AdamWConfig, BackendConfig, CapacityConfig,
                                   Config, ConstantConfig, ExponentialConfig, Heat1dConfig, JaxConfig, JnoBackendConfig,
                                   LBFGSConfig, MemoryConfig, MixedPoisson1dConfig, ModelConfig, OptimizerConfig,
                                   PhaseConfig, Poisson1dConfig, ScheduleConfig, SGDConfig, SoapConfig, SolverConfig,
                                   TimingConfig, TrackingConfig, WarmupCosineConfig, typed)

__all__ = ["AdamConfig", "AdamWConfig", "BackendConfig", "BACKENDS", "build_faults", "build_problem", "builds_problem",
           "built_problem", "CapacityConfig", "Config", "CONFIG_PACKAGE", "ConstantConfig", "effective_settings",
           "ExponentialConfig", "failed_import", "Heat1dConfig", "import_from_working_directory", "INVOCATION",
           "JaxConfig", "JnoBackendConfig", "LBFGSConfig", "MemoryConfig", "MixedPoisson1dConfig", "ModelConfig",
           "OptimizerConfig", "OPTIMIZERS", "option_refusals", "out_of_range", "overrides_without", "Phase",
           "PhaseConfig", "Poisson1dConfig", "problem", "PROBLEM_ARGUMENTS", "problem_call", "problem_faults",
           "problem_fields", "problem_function", "PROBLEMS", "ScheduleConfig", "SCHEDULES", "SGDConfig", "SoapConfig",
           "SolverConfig", "SWEEP_KEYS", "TIMED_OPTIONS", "timing_refusals", "TimingConfig", "TRACKING_KEYS",
           "TrackingConfig", "training_phases", "typed", "UnbuiltProblem", "unknown_field", "WarmupCosineConfig"]
