"""crux's sweeper: Hydra's basic sweeper's jobs (every combination of the swept values, numbered alike), run as a
crux sweep with a parent run in MLflow (:mod:`cruxlab.runtime.multirun`).

Hydra instantiates a sweeper only from the ``hydra_plugins`` package, and imports
every module there when any Hydra application starts: this one is thin and imports
crux when it sweeps. Hydra's scan of ``hydra_plugins`` misses a package installed
in editable mode, so crux-run registers the class itself, and :mod:`cruxlab.config`
registers its config, ``hydra/sweeper=crux`` (:class:`hydra_plugins.crux_sweeper.config.SweeperConfig`).
"""

from typing import Any, Dict, List, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class CruxSweeper(Sweeper):
    """The fields of :class:`hydra_plugins.crux_sweeper.config.SweeperConfig`."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 resume: bool = False, command: Optional[str] = None) -> None:
        super().__init__()
        self.max_batch_size, self.params, self.resume, self.command = max_batch_size, params, resume, command

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """The launcher of ``config``; on joblib's, each job in a process of its own that the pool's worker
        waits on, so that a job killed (out of memory) costs that job only (:mod:`cruxlab.runtime.job_process`)."""
        from hydra.core.plugins import Plugins

        from cruxlab.runtime.job_process import InOwnProcess

        self.hydra_context, self.config = hydra_context, config
        if str(config.hydra.launcher.get("_target_", "")).endswith(".JoblibLauncher"):
            task_function = InOwnProcess(task_function)
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        """Run the multirun (its ``hydra.sweeper.params`` and command line are in the config)."""
        import shlex
        import sys

        from cruxlab.runtime.composed import compose_once
        from cruxlab.runtime.multirun import Multirun

        loader = self.hydra_context.config_loader
        command = self.command or shlex.join(["crux-run", *sys.argv[1:]])
        return Multirun(self.config, OverridesParser.create(config_loader=loader), self.launcher,
                        compose_once(loader), self.max_batch_size, command).run(self.resume)
