"""A Hydra callback for the tests: what each job returned to its sweeper (what Optuna's would minimise), one JSON
line per job in the file ``path``."""
import json

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback


class Returned(Callback):
    def __init__(self, path: str):
        self.path = path

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if job_return.status == JobStatus.COMPLETED:
            with open(self.path, "a") as file:
                file.write(json.dumps({"overrides": list(job_return.overrides),
                                       "returned": job_return.return_value}) + "\n")
