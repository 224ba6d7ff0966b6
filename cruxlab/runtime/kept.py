"""A job's results that the store could not take, kept on this machine's disk until a later command writes them.

A store that fails while a job trains or once it has trained (a full disk, a
tracking server killed, PostgreSQL stopped) must not cost the job: its run's
artifacts and what remains to be sent (:class:`cruxlab.runtime.handover.Results`:
the histories' ``stats.npz``, the summary, the params, how to create the run where
the store never did) are kept in the sweep's folder, ``<sweep>/kept/<job>``, laid out
as a hand-over. Where that folder's disk is full too, they stay in a folder of
their own beside where they were staged, named in the sweep's fault record
(:func:`cruxlab.store.faults.record_kept`). ``crux-sweep NAME --resume`` writes them
into the job's own run before it runs anything (:mod:`cruxlab.runtime.sweep_parent`): the
run closes FINISHED with its own history and the job is not trained again. A lone
``crux-run`` keeps them in its output folder, ``<output>/kept/0``, with the store they go to; ``crux-run
--write-kept FOLDER`` writes them (:mod:`cruxlab.runtime.write_kept`).
"""
from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import asdict
from pathlib import Path

from crux.failures import failure_line
from cruxlab.runtime.handover import ARTIFACTS, RESULTS, Results, leave
from cruxlab.store.faults import record_kept, recorded_fault

log = logging.getLogger(__name__)

KEPT = "kept"
WRITE_KEPT = "--write-kept"
"""``crux-run --write-kept FOLDER``: the results a lone run kept in FOLDER written into its run; nothing trains."""


def kept_folder(sweep_dir: Path) -> Path:
    """Where the sweep in ``sweep_dir`` keeps the results the store could not take, a folder per job."""
    return sweep_dir / KEPT


def keep(folder: Path, results: Results, staged: Path, sweep_dir: Path | None) -> Path | None:
    """Keep ``results`` and the artifacts staged in ``staged`` in ``folder/kept/<job>``; where that disk has no
    room, in a folder beside ``staged``, recorded in the fault record of ``sweep_dir`` (a sweep's). The folder
    they are in; None, said in the log, where no disk took them."""
    try:
        return leave(kept_folder(folder), results, staged)
    except OSError as error:
        reason = failure_line(error)
    try:
        beside = Path(tempfile.mkdtemp(prefix=f"crux-kept-job{results.job}-", dir=staged.parent.parent))
        staged.rename(beside / ARTIFACTS)
        (beside / RESULTS).write_text(json.dumps(asdict(results)))
    except OSError as error:
        log.error("the results of job %s could be kept neither in %s (%s) nor beside %s (%s): they are lost",
                  results.job, kept_folder(folder), reason, staged, failure_line(error))
        return None
    if sweep_dir is not None:
        record_kept(sweep_dir, results.job, beside)
    return beside


def kept_results(sweep_dir: Path) -> list[Path]:
    """The folders of the results the sweep in ``sweep_dir`` kept, in job order: its ``kept/`` folder's, and
    those its fault record names elsewhere."""
    found = [entry for entry in kept_folder(sweep_dir).glob("*") if not entry.name.startswith(".")] \
        if kept_folder(sweep_dir).is_dir() else []
    recorded = (recorded_fault(sweep_dir) or {}).get("kept", {})
    found += [Path(where) for where in recorded.values() if (Path(where) / RESULTS).is_file()]
    return sorted(found, key=lambda entry: json.loads((entry / RESULTS).read_text()).get("job", -1)
                  if (entry / RESULTS).is_file() else -1)
