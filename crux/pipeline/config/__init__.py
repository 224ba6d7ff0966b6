"""crux-run/crux-sweep configs: the schema (:mod:`~crux.pipeline.config.schema`), what a composed config builds
(the problem and the training phases: :mod:`~crux.pipeline.config.building`) and what in it no run could use
(:mod:`~crux.pipeline.config.checks`). Importing it registers the schema with Hydra; its names are those of the
three modules.
"""
from crux.pipeline.config.building import (PROBLEM_ARGUMENTS, Phase, batch_as_applied, build_problem,
                                           effective_settings, failed_import, import_from_working_directory, problem,
                                           problem_call, problem_fields, problem_function, training_phases,
                                           unknown_field)
from crux.pipeline.config.checks import (UnbuiltProblem, build_faults, builds_problem, built_problem, out_of_range,
                                         overrides_without, problem_faults, timing_refusals)
from crux.pipeline.config.schema import (BACKENDS, CONFIG_PACKAGE, INVOCATION, OPTIMIZERS, PROBLEMS, SCHEDULES,
                                         SWEEP_KEYS, TIMED_OPTIONS, TRACKING_KEYS, AdamConfig, AdamWConfig,
                                         BackendConfig, CapacityConfig, Config, ConstantConfig, ExponentialConfig, Heat1dConfig,
                                         JaxConfig, JnoBackendConfig, LBFGSConfig, MemoryConfig, MixedPoisson1dConfig,
                                         ModelConfig, OptimizerConfig, PhaseConfig, Poisson1dConfig, ScheduleConfig,
                                         SGDConfig, SoapConfig, SolverConfig, TimingConfig, TrackingConfig,
                                         WarmupCosineConfig, typed)

__all__ = ["UnbuiltProblem", "build_faults", "builds_problem", "built_problem", "AdamConfig", "AdamWConfig", "BACKENDS", "BackendConfig", "CONFIG_PACKAGE", "CapacityConfig", "Config", "ConstantConfig",
           "ExponentialConfig", "Heat1dConfig", "INVOCATION", "JaxConfig", "JnoBackendConfig", "LBFGSConfig",
           "MemoryConfig", "MixedPoisson1dConfig", "ModelConfig", "OPTIMIZERS", "OptimizerConfig", "PROBLEMS",
           "PROBLEM_ARGUMENTS", "Phase", "PhaseConfig", "Poisson1dConfig", "SCHEDULES", "SGDConfig", "SWEEP_KEYS",
           "ScheduleConfig", "SoapConfig", "SolverConfig", "TIMED_OPTIONS", "TRACKING_KEYS", "TimingConfig",
           "TrackingConfig", "WarmupCosineConfig", "batch_as_applied", "build_problem", "effective_settings",
           "failed_import", "import_from_working_directory", "out_of_range", "overrides_without", "problem",
           "problem_call", "problem_faults", "problem_fields", "problem_function", "timing_refusals", "typed",
           "training_phases", "unknown_field"]
