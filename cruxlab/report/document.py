"""``report.md`` and ``verdicts.json``: written only from the runs, so the same runs give the same bytes.

Nothing here reads the clock, the output folder or the machine the report is
made on: the environment, commit and configs shown are those the runs recorded.
The top says which sweep was judged and what it lacks (jobs that did not finish,
artifacts that could not be read), and names the newer sweeps of the same name:
the same sweep gives the same report whether it was chosen by default or with
``--run``.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import yaml

from cruxlab.report.drawing import Figure
from cruxlab.report.run_records import RunRecord, describe
from cruxlab.report.sweep_reader import DEFAULT_BACKEND, Sweep
from cruxlab.report.verdict import Verdict, fmt
from cruxlab.store.contract import ADJUSTED, BACKEND, CHOSEN, COMMAND, FINISHED, JOB, NETWORK_PARAMS, WORKING_DIR

NO_CHECK = ("none: no claim's check concerns the settings this sweep ran (crux-report NAME --claim CHECK judges "
            "one all the same)")
"""What a report says of a sweep that names no claim (``crux-run -m``) and ran no setting any check is about."""
SUMMARY_METRICS = ("final_loss", "median_step_seconds", "compile_seconds", "run_seconds", "memory/temp_bytes",
                   "memory/argument_bytes")


def verdicts_json(verdicts: Sequence[Verdict], backend: str | None = None) -> str:
    """The ``verdicts.json`` text.

    Args:
        verdicts: the verdicts, in the order to write.
        backend: the library that trained the runs, added to each entry; None: none added (crux's own).

    Returns:
        A JSON list of objects with claim, verdict, evidence, threshold, runs (and more), keys sorted.
    """
    return _json([{**v.as_dict(), "backend": backend} if backend else v.as_dict() for v in verdicts])


def _json(entries: list[dict]) -> str:
    return json.dumps(entries, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """Plain-text table for the terminal: verdict, claim id, finding."""
    width = max((len(v.id) for v in verdicts), default=5)
    lines = [f"{'verdict':<13} {'claim':<{width}}  finding", f"{'-' * 13} {'-' * width}  {'-' * 7}"]
    lines += [f"{v.verdict:<13} {v.id:<{width}}  {v.summary}" for v in verdicts]
    return "\n".join(lines)


def table_cell(text: object) -> str:
    """``text`` as one cell of a Markdown table: its pipes escaped, its lines joined."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value: float) -> str:
    """Counts and byte sizes in full, everything else to three significant digits."""
    if isinstance(value, (int, float)) and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return fmt(value) if isinstance(value, (int, float)) else str(value)


def _verdict_section(v: Verdict) -> list[str]:
    lines = [f"### {v.id}: **{v.verdict}**", "", f"> {v.claim}", "", f"Quoted from {v.source}.", "",
             f"**Finding:** {v.summary}", "", f"**Test:** {v.test}", ""]
    if v.evidence:
        lines += ["| evidence | value |", "|---|---|"]
        lines += [f"| {table_cell(k)} | {_number(x)} |" for k, x in sorted(v.evidence.items())]
        lines.append("")
    if v.thresholds:
        origins = sorted({t.origin for t in v.thresholds.values()})
        lines += ["| threshold | value | rule | origin |", "|---|---|---|---|"]
        lines += [f"| {table_cell(k)} | {_number(t.value)} | {table_cell(t.rule)} | ({origins.index(t.origin) + 1}) |"
                  for k, t in sorted(v.thresholds.items())]
        lines += [""] + [f"({i}) {origin}" for i, origin in enumerate(origins, start=1)] + [""]
    lines += [f"Runs: {', '.join(f'`{r}`' for r in sorted(v.runs)) or 'none'}", ""]
    return lines


def _runs_table(records: Sequence[RunRecord]) -> list[str]:
    header = ["run", "variant", "repeat", "options"] + list(SUMMARY_METRICS)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        metrics = [_number(r.metrics[m]) if m in r.metrics else "" for m in SUMMARY_METRICS]
        lines.append("| " + " | ".join([f"`{r.run_id}`", table_cell(r.label), str(r.repeat),
                                        table_cell(describe(r.options)), *metrics]) + " |")
    return lines


def trained_with(records: Sequence[RunRecord]) -> list[str]:
    """What each network trained with in the runs' first phase (their ``network.<name>.optimizer`` and
    ``.schedule`` params), one line naming the runs where they differ, which of the config's choices went to every
    network (``crux.chosen_for_every_network``: a sweep whose claim needs one optimizer sets it so) and each line a
    job said on replacing a problem's own optimizer or schedule; nothing for runs that recorded none (another
    backend, older runs)."""
    networks: dict[str, dict[str, list[str]]] = {}
    for r in records:
        for key, optimizer in r.params.items():
            name, _, last = key[len(NETWORK_PARAMS):].rpartition(".")
            if key.startswith(NETWORK_PARAMS) and last == "optimizer" and "." not in name:
                words = f"{optimizer} at {r.params.get(f'{NETWORK_PARAMS}{name}.schedule', '?')}"
                networks.setdefault(name, {}).setdefault(words, []).append(r.label)
    if not networks:
        return []
    said = [" or ".join(words + ("" if len(networks[name]) == 1 else f" ({', '.join(sorted(set(labels)))})")
                        for words, labels in sorted(networks[name].items())) for name in sorted(networks)]
    replaced = sorted({line for r in records for line in r.tags.get(ADJUSTED, "").split("; ")
                       if line.startswith("network ")})
    chosen = sorted({r.tags[CHOSEN] for r in records if CHOSEN in r.tags})
    return ([f"Each network trained with (first phase): {'; '.join(f'{n} {w}' for n, w in zip(sorted(networks), said))}"
             + (f". Chosen for every network: {' or '.join(chosen)}" if chosen else "")
             + (f". The config replaced a problem's own: {'; '.join(replaced)}" if replaced else "") + ".", ""])


def _job_number(record: RunRecord) -> int:
    text = record.tags.get(JOB, "")
    return int(text) if text.isdigit() else 0


def _share(compile_seconds: float, run_seconds: float) -> str:
    total = compile_seconds + run_seconds
    return f"{compile_seconds / total:.0%}" if total > 0 else "–"


def _time_rows(records: Sequence[RunRecord]) -> list[str]:
    """Per variant, its jobs' compile seconds beside their training seconds: the first job's (its program
    compiled, or loaded from JAX's persistent cache) and the later jobs' (the process's executable reused), and
    the first job's share of its time spent compiling; then the share of the first jobs and of the later ones
    over the sweep."""
    variants: dict[str, list[RunRecord]] = {}
    for r in records:
        if "compile_seconds" in r.metrics and "run_seconds" in r.metrics:
            variants.setdefault(r.label, []).append(r)
    if not variants:
        return []
    lines = ["## Compile and training time", "",
             "Per variant, in the order its jobs ran: the first job's `compile_seconds` (its update compiled, or "
             "loaded from JAX's persistent compilation cache) and the later jobs' (median), beside `run_seconds` "
             "(training; median over the jobs); the first job's compile share is its compile seconds over its "
             "compile and training seconds.", "",
             "| variant | jobs | first job's compile s | later jobs' compile s | run s | first job's compile share |",
             "|---|---:|---:|---:|---:|---:|"]
    totals = {"first": [0.0, 0.0], "later": [0.0, 0.0]}
    for runs in sorted((sorted(runs, key=_job_number) for runs in variants.values()), key=lambda r: _job_number(r[0])):
        first, *later = runs
        seconds = lambda r: (float(r.metrics["compile_seconds"]), float(r.metrics["run_seconds"]))
        for kind, group in (("first", [first]), ("later", later)):
            for r in group:
                totals[kind] = [a + b for a, b in zip(totals[kind], seconds(r))]
        later_compile = fmt(float(np.median([seconds(r)[0] for r in later]))) if later else "–"
        lines.append(f"| {table_cell(first.label)} | {len(runs)} | {fmt(seconds(first)[0])} | {later_compile} | "
                     f"{fmt(float(np.median([seconds(r)[1] for r in runs])))} | {_share(*seconds(first))} |")
    lines += ["", f"The first jobs spent {_share(*totals['first'])} of their compile and training seconds compiling "
                  f"({fmt(totals['first'][0])} of {fmt(sum(totals['first']))} s)"
              + (f"; the later jobs {_share(*totals['later'])} ({fmt(totals['later'][0])} of "
                 f"{fmt(sum(totals['later']))} s)." if sum(totals["later"]) > 0 else "."), ""]
    return lines


ABSENT = "(absent)"
"""How a run's entry reads where the run did not record it."""


def _flat(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """``tree``'s leaves by their path (a mapping that holds nothing is a leaf, lists are leaves)."""
    leaves: dict[tuple[str, ...], object] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            leaves.update(_flat(value, (*prefix, str(key))))
        else:
            leaves[(*prefix, str(key))] = value
    return leaves


def _nested(leaves: Mapping[tuple[str, ...], object]) -> dict:
    tree: dict = {}
    for path, value in leaves.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def shared_and_own(trees: Sequence[Mapping]) -> tuple[dict, list[dict[str, object]]]:
    """What every tree holds alike (nested, in the first tree's order), and per tree the entries it does not
    share, by dotted path (``ABSENT`` where it lacks one that another has)."""
    flats = [_flat(tree) for tree in trees]
    paths = list(dict.fromkeys(path for flat in flats for path in flat))
    alike = {path: flats[0][path] for path in paths
             if all(path in flat and flat[path] == flats[0][path] for flat in flats)}
    own = [{".".join(path): flat.get(path, ABSENT) for path in paths if path not in alike} for flat in flats]
    return _nested(alike), own


def _value(value: object) -> str:
    return value if value is ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _own_rows(records: Sequence[RunRecord], own: Sequence[Mapping[str, object]], what: str) -> list[str]:
    """Per run, what it recorded apart from what all share: a table, or a line saying that all are alike."""
    if not any(own):
        return [f"Every run recorded this {what}.", ""]
    lines = [f"Per run, what differs from the {what} above:", "", "| run | variant | repeat | its own |",
             "|---|---|---|---|"]
    lines += [f"| `{r.run_id}` | {table_cell(r.label)} | {r.repeat} | "
              + table_cell("; ".join(f"`{key}` = {_value(value)}" for key, value in entries.items())) + " |"
              for r, entries in zip(records, own)]
    return lines + [""]


def _environments(records: Sequence[RunRecord]) -> list[str]:
    """The environment.json every run recorded alike, once, and per run what differs from it (timings hold for
    the environment they were taken in)."""
    if not records:
        return []
    alike, own = shared_and_own([r.environment for r in records])
    return (["The entries of environment.json that every run recorded alike:", "", "```json",
             json.dumps(alike, indent=1, sort_keys=True, ensure_ascii=False), "```", ""]
            + _own_rows(records, own, "environment"))


def _distinct(records: Sequence[RunRecord], *keys: str) -> list[tuple]:
    """The distinct values of ``keys`` in the runs' environment.json, in order (None where a run lacks one)."""
    found: dict[str, tuple] = {}
    for r in records:
        values = tuple(r.environment.get(key) for key in keys)
        found.setdefault(json.dumps(values, sort_keys=True, default=str), values)
    return [found[text] for text in sorted(found)]


def _folder_code(records: Sequence[RunRecord]) -> list[str]:
    """The code of the folder the runs ran in: its commit, and the problem module each ran, by file and hash."""
    lines = []
    for commit, dirty in _distinct(records, "git_commit", "git_dirty"):
        lines.append(f"- the folder's commit `{commit}`" + (" with uncommitted changes" if dirty else "")
                     if commit else "- the folder was not in a git repository: the problem's file below is its code")
    for module, file, digest in _distinct(records, "problem_module", "problem_file", "problem_sha256"):
        if module:
            lines.append(f"- the problem's module `{module}`" + (f", file `{file}` of sha256 `{digest}`" if digest else
                                                                   " (its file was not found)"))
    return lines


def crux_installs(records: Sequence[RunRecord]) -> tuple[list[str], list[str]]:
    """How the runs' crux was installed, in words, and the commands that install that exact crux: the wheel pip
    installed, from where pip took it, checked against its sha256; a clone of the checkout at its commit; else
    the released version."""
    said, commands = [], []
    for version, wheel, path, digest, files, commit, clean, source, origin in _distinct(
            records, "crux_version", "crux_wheel", "crux_wheel_path", "crux_wheel_sha256", "crux_files_sha256",
            "crux_commit", "crux_clean", "crux_source", "crux_origin"):
        version = version or next((v for r in records if (v := r.environment.get("versions", {}).get("crux"))), None)
        if wheel and digest:
            said.append(f"- crux {version} from the wheel `{path or wheel}`, sha256 `{digest}`"
                        + (f" (its installed files: `{files}`)" if files else ""))
            located = shlex.quote(path or wheel)
            commands += [f"echo '{digest}  {path or wheel}' | sha256sum --check   # the wheel the runs installed",
                         f"pip install {located}"]
        elif commit:
            said.append(f"- crux {version} from a checkout at commit `{commit}`" + (f" (`{source}`)" if source else "")
                        + ("" if clean else ", with uncommitted changes (the commit alone does not hold the code that "
                           "ran)" if clean is False else ""))
            where = shlex.quote(source) if source else "CRUX_REPOSITORY"
            commands += [f'src=$(mktemp -d)/crux && git clone --quiet {where} "$src" && git -C "$src" checkout '
                         f'--quiet {commit}' + (f"   # or clone {origin}" if origin and source else
                                               "   # CRUX_REPOSITORY: a clone of crux's repository" if not source
                                               else ""),
                         'pip install "$src"']
        else:
            said.append(f"- crux {version}" + (f", its installed files `{files}`" if files else "")
                        + " (no wheel or checkout recorded)")
            commands.append(f"pip install crux=={version}")
    return said, commands


def runtime_of(records: Sequence[RunRecord]) -> tuple[list[str], list[str]]:
    """The jax, jaxlib and optax the runs ran, the backend, device and matmul precision, and the command that
    installs those versions."""
    said, pins = [], set()
    for versions, backend, device, precision in _distinct(records, "versions", "backend", "device_kind",
                                                         "matmul_precision"):
        versions = dict(versions or {})
        named = [(package, versions.get(package)) for package in ("jax", "jaxlib", "optax")]
        said.append("- " + ", ".join(f"{package} {found}" for package, found in named)
                    + f" on {backend} ({device}), matmul precision {precision}")
        pins |= {f"{package}=={found}" for package, found in named if found}
    return said, [f"pip install {' '.join(sorted(pins))}"] if pins else []


def _reproduce(sweep: Sweep, overrides: str) -> list[str]:
    """Commands that run the sweep again: the folder, the exact crux and jax to install, the command as typed
    (a sweep file's path and ``--config-dir`` included), then the report; and what identifies the code."""
    command = sweep.parent_tags.get(COMMAND) or f"crux-sweep {sweep.name} {overrides}".rstrip()
    folder = sweep.parent_tags.get(WORKING_DIR)
    installs, install_commands = crux_installs(sweep.records)
    runtime, runtime_commands = runtime_of(sweep.records)
    lines = ["## Reproduce", ""]
    lines += [f"The sweep ran in `{folder}`, which holds what its command names (a sweep file, a config folder, "
              f"a problem's module); its code, per run:" if folder else "The code the runs recorded:", ""]
    lines += _folder_code(sweep.records)
    lines += ["", "with", ""] + installs + runtime
    lines += ["", "To run it again: in a fresh shell, with a fresh virtual environment active (`python3 -m venv env && "
              ". env/bin/activate`), line by line:"]
    lines += ["", "```sh"] + ([f"cd {shlex.quote(folder)}"] if folder else []) + install_commands + runtime_commands
    lines += [command, f"crux-report {sweep.name}", "```", "",
              "This report itself (same runs, same report.md and verdicts.json):", "", "```sh",
              f"MLFLOW_TRACKING_URI={sweep.uri} crux-report {sweep.name} --run {sweep.parent_id}", "```", ""]
    return lines


def _parsed(config: str) -> Mapping:
    """A run's config.yaml as a mapping (the whole text under one key, should it not be one)."""
    try:
        tree = yaml.safe_load(config)
    except yaml.YAMLError:
        tree = None
    return tree if isinstance(tree, Mapping) else {"config.yaml": config}


def _configs(records: Sequence[RunRecord]) -> list[str]:
    """The resolved config every run ran alike, once, and per run what differs from it; runs whose config.yaml
    could not be read are named."""
    read = [r for r in records if r.config]
    if not read:
        return []
    alike, own = shared_and_own([_parsed(r.config) for r in read])
    lines = ["The entries of config.yaml that every run resolved alike:", "", "```yaml",
             yaml.safe_dump(alike, sort_keys=False, allow_unicode=True).rstrip(), "```", ""]
    lines += _own_rows(read, own, "config")
    unread = [f"`{r.run_id}` ({r.label})" for r in records if not r.config]
    return lines + ([f"No config.yaml could be read of {', '.join(unread)}.", ""] if unread else [])


def completeness(sweep: Sweep) -> str:
    """``complete: 8 of 8 planned jobs finished`` or ``incomplete: 3 of 8 planned jobs finished, and its parent
    run is KILLED``."""
    if sweep.jobs is not None and not sweep.jobs.plan_recorded:
        counted = f"{sweep.finished} of the {sweep.planned} jobs that started finished (the sweep recorded no plan)"
    else:
        counted = f"{sweep.finished} of {sweep.planned} planned jobs finished"
    if sweep.complete:
        return f"complete: {counted}"
    status = sweep.jobs.parent_status
    return f"incomplete: {counted}" + (f", and its parent run is {status}" if status != FINISHED else "")


def _sweep_status(sweep: Sweep) -> list[str]:
    """Which sweep, whether it is complete, the newer sweeps of its name, what it lacks."""
    started = f", started {sweep.started}" if sweep.started else ""
    state = f"{completeness(sweep)}." if sweep.complete else f"**{completeness(sweep)}.**"
    lines = [f"Sweep `{sweep.name}`, parent run `{sweep.parent_id}`{started}: {state}", ""]
    if sweep.newer:
        lines += [f"Newer sweeps of `{sweep.name}` in this store: " + ", ".join(
            f"`{s.parent_id}` (started {s.started}, {'complete' if s.complete else 'incomplete'}: {s.finished} of "
            f"{s.planned} jobs finished, parent {s.status})" for s in sweep.newer) + ".", ""]
    if sweep.missing:
        lines += ["Jobs without a finished run (verdicts that lack their runs are inconclusive):", "",
                  "| job | status | why | run |", "|---|---|---|---|"]
        lines += [f"| {table_cell(j.name)} | {j.status} | {table_cell(j.reason)} | "
                  f"{f'`{j.run_id}`' if j.run_id else ''} |" for j in sweep.missing]
        lines.append("")
    if sweep.elsewhere:
        lines += [f"**{sweep.artifacts_elsewhere}.**", ""]
    if sweep.unreadable:
        lines += ["Artifacts that could not be read (verdicts that need them are inconclusive):", ""]
        lines += [f"- {u.artifact} of run `{u.run_id}` ({u.label}): {table_cell(u.problem)}"
                  + ("" if u.judged else "; the run is left out") for u in sweep.unreadable]
        lines.append("")
    return lines


def report_markdown(sweep: Sweep, verdicts: Sequence[Verdict], figures: Sequence[Figure], claims: Sequence[str]
                    ) -> str:
    """The whole ``report.md``.

    Args:
        sweep: the sweep judged.
        verdicts: its verdicts.
        figures: the figures drawn beside it, each shown in its claim's section.
        claims: the claims judged, one section each.

    Returns:
        The Markdown text.
    """
    overrides = " ".join(sweep.overrides)
    lines = [f"# crux claim report: {sweep.name}", ""] + _sweep_status(sweep)
    lines += ["## Verdicts", "", "| claim | verdict | finding |", "|---|---|---|"]
    lines += [f"| {table_cell(v.id)} | **{v.verdict}** | {table_cell(v.summary)} |" for v in verdicts]
    lines += ["", f"Claims judged: {', '.join(claims) or NO_CHECK}."
              + (f" The sweep set out to check: *{sweep.statement.strip()}*" if sweep.statement else ""), ""]
    lines += trained_with(sweep.records)
    for claim in claims:
        lines += [f"## {claim}", ""]
        for v in verdicts:
            if v.id.split(".")[0] == claim:
                lines += _verdict_section(v)
        for figure in figures:
            if figure.claim == claim:
                lines += [f"![{figure.caption}]({figure.file})", "", f"*{figure.caption}.*", ""]
    lines += _time_rows(sweep.records)
    lines += ["## Runs", ""] + _runs_table(sweep.records) + [""]
    lines += _reproduce(sweep, overrides)
    lines += ["## Environment", ""] + _environments(sweep.records)
    lines += ["## Resolved config", ""] + _configs(sweep.records)
    return "\n".join(lines).rstrip() + "\n"


def write_report(out: Path, sweep: Sweep, verdicts: Sequence[Verdict], figures: Sequence[Figure],
                 claims: Sequence[str]) -> None:
    """Write ``report.md`` and ``verdicts.json`` into ``out`` (the figures are already there); the verdicts of a
    sweep that another library than crux trained (``backend=jno``) name it.

    Args:
        out: the folder, made where missing.
        sweep: the sweep judged.
        verdicts: its verdicts.
        figures: the figures already drawn into ``out``.
        claims: the claims judged.

    Raises:
        OSError: ``out`` cannot be written.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report_markdown(sweep, verdicts, figures, claims), encoding="utf-8")
    backend = sweep.parent_tags.get(BACKEND, DEFAULT_BACKEND)
    (out / "verdicts.json").write_text(verdicts_json(verdicts, None if backend == DEFAULT_BACKEND else backend),
                                       encoding="utf-8")


# -- several backends side by side ------------------------------------------------------------------------------
SAME_AS_CRUX_BATCHING = "batching=points"
"""The jNO form that draws collocation points, as crux does: its verdicts sit in crux's rows."""
Judged = Mapping[str, tuple[Sweep, Sequence[Verdict]]]


def row_name(label: str) -> str:
    """A run label or verdict id without the qualifier that names crux's own way of batching."""
    head, bracket, inner = label.partition("[")
    parts = [p for p in (inner[:-1] if bracket else head).split(",") if p != SAME_AS_CRUX_BATCHING]
    return f"{head}[{','.join(parts)}]" if bracket else ",".join(parts)


def _by_row(judged: Judged) -> dict[str, dict[str, list[Verdict]]]:
    rows: dict[str, dict[str, list[Verdict]]] = {}
    for backend, (_, verdicts) in judged.items():
        for v in verdicts:
            rows.setdefault(row_name(v.id), {}).setdefault(backend, []).append(v)
    return rows


def _cell_of(verdicts: Sequence[Verdict] | None) -> str:
    return " / ".join(v.verdict for v in verdicts) if verdicts else "–"


def side_by_side_table(judged: Judged) -> str:
    """Plain-text table for the terminal: one row per claim and setting, one verdict column per backend."""
    rows = _by_row(judged)
    width = max((len(r) for r in rows), default=5)
    lines = [f"{'claim':<{width}}  " + "  ".join(f"{b:<13}" for b in judged)]
    lines += [f"{row:<{width}}  " + "  ".join(f"{_cell_of(cells.get(b)):<13}" for b in judged)
              for row, cells in rows.items()]
    return "\n".join(lines)


def _speed_rows(judged: Judged) -> list[str]:
    """Per setting, steps per second and compile seconds of each backend: median [min–max] over repeats."""
    settings: dict[str, dict[str, list[RunRecord]]] = {}
    for backend, (sweep, _) in judged.items():
        for r in sweep.records:
            if not r.unsupported:
                settings.setdefault(row_name(r.label), {}).setdefault(backend, []).append(r)

    def spread(runs: Sequence[RunRecord] | None, metric: str) -> str:
        values = sorted(float(r.metrics[metric]) for r in runs or () if metric in r.metrics)
        if not values:
            return "–"
        shown = [f"{v:.0f}" if v >= 100 else fmt(v) for v in (float(np.median(values)), values[0], values[-1])]
        return shown[0] if len(values) == 1 else f"{shown[0]} [{shown[1]}–{shown[2]}]"

    header = ["setting"] + [f"{b} steps/s" for b in judged] + [f"{b} compile s" for b in judged]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting, runs in settings.items():
        cells = [spread(runs.get(b), "steps_per_second") for b in judged]
        cells += [spread(runs.get(b), "compile_seconds") for b in judged]
        lines.append("| " + " | ".join([table_cell(setting), *cells]) + " |")
    return lines


def side_by_side_markdown(name: str, judged: Judged) -> str:
    """``report.md`` of a claim judged on several backends: their verdicts and speeds side by side, each backend's
    full report in its own folder."""
    backends = list(judged)
    lines = [f"# crux claim report: {name}, {' vs '.join(backends)}", "",
             "Each library's latest sweep, judged on its own runs (a run is never paired with another library's). "
             f"Rows name the claim and the setting; `{SAME_AS_CRUX_BATCHING}` (mini-batches of collocation points) is "
             "how crux batches, so those verdicts share crux's row.", ""]
    lines += [f"- {b}: parent run `{sweep.parent_id}`, {len(sweep.records)} finished run(s), "
              f"{len(sweep.jobs.missing) if sweep.jobs else 0} planned job(s) without one, on "
              f"{sweep.records[0].device if sweep.records else 'no recorded device'}; full report: "
              f"[{b}/report.md]({b}/report.md)" for b, (sweep, _) in judged.items()]
    lines += ["", "## Verdicts", "", "| claim | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for row, cells in _by_row(judged).items():
        lines.append(f"| {table_cell(row)} | " + " | ".join(f"**{_cell_of(cells.get(b))}**" for b in backends) + " |")
    lines += ["", "## Findings", ""]
    for row, cells in _by_row(judged).items():
        for b in backends:
            lines += [f"- {table_cell(row)}, {b}: {table_cell(v.summary)}" for v in cells.get(b, ())]
    lines += ["", "## Speed", "", "Steps (epochs) per second of training, compile excluded, and the seconds before "
              "training (compiling; jNO's set-up and warm-up calls too): median [min–max] over repeats.", ""]
    lines += _speed_rows(judged)
    return "\n".join(lines).rstrip() + "\n"


def write_side_by_side(out: Path, name: str, judged: Judged) -> None:
    """``report.md`` (the comparison) and ``verdicts.json`` (every backend's verdicts, each with its
    ``backend``) into ``out``; each backend's own report goes to ``out/<backend>/`` (:func:`write_report`)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(side_by_side_markdown(name, judged), encoding="utf-8")
    entries = [{**v.as_dict(), "backend": backend} for backend, (_, verdicts) in judged.items() for v in verdicts]
    (out / "verdicts.json").write_text(_json(entries), encoding="utf-8")
