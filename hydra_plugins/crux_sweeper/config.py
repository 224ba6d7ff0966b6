"""The config of crux's sweeper, ``hydra/sweeper=crux`` (registered by crux's pipeline with its own schema)."""
from dataclasses import dataclass
from typing import Dict, Optional


@dataclass
class SweeperConfig:
    """``hydra/sweeper=crux`` (``hydra_plugins/crux_sweeper``): ``params`` and ``max_batch_size`` as for
    Hydra's basic sweeper; ``resume``: continue the newest sweep of the name, running the jobs of its plan that
    did not finish, instead of starting one; ``command``: the command line that runs the sweep, for the parent
    run's description and the messages (default: ``crux-run`` and the process's arguments)."""

    _target_: str = "hydra_plugins.crux_sweeper.crux_sweeper.CruxSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    resume: bool = False
    command: Optional[str] = None
