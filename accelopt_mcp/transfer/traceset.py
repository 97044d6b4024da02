"""Moving a kernel database to and from a FlashInfer-Trace directory.

The directory is what flashinfer-bench 0.1.2 reads (`TraceSet.from_path`):

    definitions/<op_type>/<definition>.json
    workloads/<op_type>/<definition>.jsonl        workload traces
    solutions/<op_type>/<definition>/<solution>.json
    traces/<op_type>/<definition>.jsonl           evaluated traces

What that format has no place for (lineage, evolve metadata, benchmark settings, runs, memory,
the LLM ledger, a profile's measurements) rides along so that export -> import moves a store
without loss: an `accelopt` key inside solution files and trace lines (flashinfer-bench ignores
unknown keys), and JSONL files under `accelopt/` for runs, their checkpoint entries, experiences
and LLM calls (with their stored prompts and replies). Solutions are referred to by their
definition and source hash there (`parent_definition` beside `parent_hash`, ...), since row ids
are local to a store and one source may serve several definitions; a reference without its
definition (an export from before that) is looked up among the referring record's definition
first, then among the imported solutions with that source.

A trace line is one profile: its evaluation is the pooled figure (what flashinfer-bench reads),
and `accelopt.measurements` lists every measurement behind it, oldest first. Import stores
those one by one through upsert_profile, which pools them again (and skips one already
stored, so importing twice adds nothing); a line without the list (flashinfer-bench's files,
older exports) is one measurement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from accelopt_mcp.models import Definition, Evaluation, LlmCallIn, Solution, Trace
from accelopt_mcp.store.base import (
    ExperienceIn,
    KernelStore,
    RunEntry,
    RunRecord,
    RunUpdate,
    StoreError,
    SuiteRecord,
)
from accelopt_mcp.tasks.flashinfer_format import unreadable

EXTRA_KEY = "accelopt"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class TraceSetError(StoreError):
    """A trace directory that cannot be read: the message names the file and the problem."""


class TransferCounts(BaseModel):
    definitions: int = 0
    workloads: int = 0
    solutions: int = 0
    profiles: int = 0
    measurements: int = 0
    runs: int = 0
    experiences: int = 0
    llm_calls: int = 0
    run_entries: int = 0
    suites: int = 0


def _file_name(name: str) -> str:
    return _SAFE_NAME.sub("_", name).strip("_") or "unnamed"


def _dump(model: BaseModel, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    data = model.model_dump(mode="json", exclude_unset=True)
    if extra:
        data[EXTRA_KEY] = extra
    return data


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceSetError(unreadable(path, "trace set", exc)) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise TraceSetError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TraceSetError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceSetError(f"{path}:{number}: not valid JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise TraceSetError(f"{path}:{number}: expected a JSON object")
        yield number, row


M = TypeVar("M", bound=BaseModel)


def _validate(model: type[M], data: dict[str, Any], where: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TraceSetError(f"{where}: not a valid {model.__name__}: {exc}") from exc


# --------------------------------------------------------------------------- export


def export_traceset(store: KernelStore, root: Path) -> TransferCounts:
    """Write every record of the store under `root` (created if needed)."""
    counts = TransferCounts()
    key_of: dict[str, tuple[str, str]] = {}  # solution id -> (definition, source hash)
    for stored_def in store.list_definitions():
        definition = stored_def.definition
        group, name = _file_name(definition.op_type), _file_name(definition.name)
        def_path = root / "definitions" / group / f"{name}.json"
        def_path.parent.mkdir(parents=True, exist_ok=True)
        def_path.write_text(definition.to_json() + "\n", encoding="utf-8")
        counts.definitions += 1

        workloads = store.list_workloads(definition.name)
        _write_jsonl(
            root / "workloads" / group / f"{name}.jsonl",
            (_dump(Trace(definition=definition.name, workload=w.workload)) for w in workloads),
        )
        counts.workloads += len(workloads)

        solutions = store.list_solutions(definition_name=definition.name)
        used_files: set[str] = set()
        for row in solutions:
            key_of[row.id] = (row.definition_name, row.solution_hash)
            file_name = _file_name(row.solution.name)
            if file_name in used_files:  # two solutions share a name: keep both files
                file_name = f"{file_name}__{row.solution_hash[:12]}"
            used_files.add(file_name)
            sol_path = root / "solutions" / group / name / f"{file_name}.json"
            sol_path.parent.mkdir(parents=True, exist_ok=True)
            extra = {
                "solution_hash": row.solution_hash,
                "hash_version": row.hash_version,
                "parent_hash": None,
                "parent_definition": None,
                "evolve_metadata": row.evolve_metadata,
            }
            parent = store.get_solution(row.parent_id) if row.parent_id else None
            if parent is not None:
                extra["parent_hash"] = parent.solution_hash
                extra["parent_definition"] = parent.definition_name
            sol_path.write_text(
                json.dumps(_dump(row.solution, extra), indent=2) + "\n", encoding="utf-8"
            )
        counts.solutions += len(solutions)

        trace_rows = []
        for row in solutions:
            for profile in store.list_profiles(solution_id=row.id):
                workload = store.get_workload(profile.workload_uuid)
                if workload is None:
                    continue
                trace = Trace(
                    definition=definition.name,
                    workload=workload.workload,
                    solution=row.solution.name,
                    evaluation=profile.evaluation,
                )
                measurements = [_dump(m.evaluation) for m in store.list_measurements(profile.id)]
                trace_rows.append(
                    _dump(
                        trace,
                        {
                            "solution_hash": row.solution_hash,
                            "benchmark_config": profile.benchmark_config,
                            "measurements": measurements,
                        },
                    )
                )
                counts.measurements += len(measurements)
        _write_jsonl(root / "traces" / group / f"{name}.jsonl", trace_rows)
        counts.profiles += len(trace_rows)

    _export_engine_records(store, root, key_of, counts)
    return counts


def _refer(row: dict[str, Any], role: str, key: tuple[str, str] | None) -> None:
    """A solution reference as `<role>_hash` and `<role>_definition` (both None for none)."""
    row[f"{role}_hash"], row[f"{role}_definition"] = (key[1], key[0]) if key else (None, None)


def _export_engine_records(
    store: KernelStore, root: Path, key_of: dict[str, tuple[str, str]], counts: TransferCounts
) -> None:
    runs = store.list_runs(limit=1_000_000)
    run_rows = [
        _referring(
            run,
            key_of,
            initial_solution=run.initial_solution_id,
            best_solution=run.best_solution_id,
        )
        for run in runs
    ]
    counts.runs = _write_extra(root, "runs", run_rows)

    experiences = store.search_experiences(include_removed=True, limit=1_000_000)
    exp_rows = [
        _referring(
            item, key_of, slow_solution=item.slow_solution_id, fast_solution=item.fast_solution_id
        )
        for item in reversed(experiences)  # oldest first, so import keeps queue order
    ]
    counts.experiences = _write_extra(root, "experiences", exp_rows)

    call_rows: list[dict[str, Any]] = []
    for run in runs:
        for listed in store.list_llm_calls(run.id):
            # With its prompt and reply: the audit trail travels with the run.
            call = store.get_llm_call(listed.id) or listed
            call_rows.append(call.model_dump(mode="json"))
    counts.llm_calls = _write_extra(root, "llm_calls", call_rows)

    entry_rows = [
        entry.model_dump(mode="json", exclude={"updated_at"})
        for run in runs
        for entry in store.run_entries(run.id)
    ]
    counts.run_entries = _write_extra(root, "run_entries", entry_rows)

    # A suite's table names the kernels it measured by id: as (definition, source hash) here,
    # since ids are the exporting store's own.
    suite_rows = []
    for suite in store.list_suites(limit=1_000_000):
        row = suite.model_dump(mode="json")
        for figures in _suite_kernels(row):
            _refer(figures, "solution", key_of.get(figures.pop("solution_id", None) or ""))
        suite_rows.append(row)
    counts.suites = _write_extra(root, "suites", suite_rows)


def _referring(
    record: BaseModel, key_of: dict[str, tuple[str, str]], **solution_ids: str | None
) -> dict[str, Any]:
    """The record's row with the solution it names under each role as a reference (_refer)."""
    row = record.model_dump(mode="json")
    for role, solution_id in solution_ids.items():
        _refer(row, role, key_of.get(solution_id or ""))
    return row


def _write_extra(root: Path, name: str, rows: list[dict[str, Any]]) -> int:
    """Our own records of one kind, in EXTRA_KEY/<name>.jsonl; how many there are."""
    _write_jsonl(root / EXTRA_KEY / f"{name}.jsonl", rows)
    return len(rows)


def _suite_kernels(row: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The baseline and best figures of every case of a suite row (each names a solution)."""
    spec = row.get("spec")
    cases = spec.get("cases") if isinstance(spec, dict) else None
    for case in cases if isinstance(cases, list) else []:
        for role in ("baseline", "best"):
            figures = case.get(role) if isinstance(case, dict) else None
            if isinstance(figures, dict):
                yield figures


# --------------------------------------------------------------------------- import


def import_traceset(store: KernelStore, root: Path) -> TransferCounts:
    """Load a FlashInfer-Trace directory (ours or flashinfer-bench's) into the store.

    Idempotent: importing the same directory twice adds nothing the second time.
    """
    if not root.is_dir():
        raise TraceSetError(f"{root}: not a directory; give the root of a FlashInfer-Trace set")
    if not any((root / sub).is_dir() for sub in ("definitions", "solutions", "workloads")):
        raise TraceSetError(
            f"{root}: no definitions/, solutions/ or workloads/ folder; a FlashInfer-Trace set "
            "has definitions/<op_type>/<name>.json, solutions/..., workloads/..., traces/..."
        )
    counts = TransferCounts()
    for path in sorted((root / "definitions").rglob("*.json")):
        store.upsert_definition(_validate(Definition, _read_json(path), str(path)))
        counts.definitions += 1

    for path in sorted((root / "workloads").rglob("*.jsonl")):
        for number, row in _read_jsonl(path):
            trace = _validate(Trace, row, f"{path}:{number}")
            _require_definition(store, trace.definition, f"{path}:{number}")
            store.upsert_workload(trace.definition, trace.workload)
            counts.workloads += 1

    ids, id_of_name = _import_solutions(store, root, counts)
    _import_traces(store, root, ids, id_of_name, counts)
    _import_engine_records(store, root, ids, counts)
    return counts


class _SolutionIds:
    """The ids of imported solutions by (definition, source hash), and how a reference in the
    directory finds its solution: the definition it names, else (an export from before a
    source could serve several definitions) the referring record's definition, then the one
    imported solution with that source."""

    def __init__(self, store: KernelStore) -> None:
        self.store = store
        self.by_key: dict[tuple[str, str], str] = {}
        self.by_hash: dict[str, set[str]] = {}

    def add(self, definition: str, source_hash: str, solution_id: str) -> None:
        self.by_key[(definition, source_hash)] = solution_id
        self.by_hash.setdefault(source_hash, set()).add(solution_id)

    def find(self, source_hash: str | None, definition: str | None, near: str) -> str | None:
        """The id of the solution a reference names; `near`: the referring record's
        definition."""
        if not source_hash:
            return None
        key = (definition or near, source_hash)
        if key not in self.by_key:
            known = self.store.find_solution(*key)
            if known is not None:
                self.by_key[key] = known.id
        found = self.by_key.get(key)
        if found is None and definition is None and len(self.by_hash.get(source_hash, ())) == 1:
            found = next(iter(self.by_hash[source_hash]))
        return found


def _require_definition(store: KernelStore, name: str, where: str) -> None:
    if store.get_definition(name) is None:
        raise TraceSetError(
            f"{where}: refers to definition {name!r}, which is neither in the directory's "
            "definitions/ nor in the database"
        )


def _import_solutions(
    store: KernelStore, root: Path, counts: TransferCounts
) -> tuple[_SolutionIds, dict[tuple[str, str], str]]:
    pending: list[tuple[Solution, dict[str, Any], str]] = []
    for path in sorted((root / "solutions").rglob("*.json")):
        data = _read_json(path)
        extra = data.pop(EXTRA_KEY, None) or {}
        solution = _validate(Solution, data, str(path))
        _require_definition(store, solution.definition, str(path))
        pending.append((solution, extra, str(path)))

    ids = _SolutionIds(store)
    id_of_name: dict[tuple[str, str], str] = {}
    # Parents before children: keep passing over the pending list until lineage resolves.
    while pending:
        deferred = []
        for solution, extra, where in pending:
            parent_hash = extra.get("parent_hash")
            parent_id = ids.find(parent_hash, extra.get("parent_definition"), solution.definition)
            if parent_hash and parent_id is None:
                deferred.append((solution, extra, where))
                continue
            solution_id = store.upsert_solution(
                solution,
                parent_id=parent_id,
                evolve_metadata=extra.get("evolve_metadata") or {},
            )
            stored = store.get_solution(solution_id)
            assert stored is not None
            ids.add(stored.definition_name, stored.solution_hash, solution_id)
            id_of_name.setdefault((solution.definition, solution.name), solution_id)
            counts.solutions += 1
        if len(deferred) == len(pending):
            # A solution is deferred only for a parent_hash that is set and not found.
            missing = sorted({e["parent_hash"] for _, e, _ in deferred})
            raise TraceSetError(
                f"{deferred[0][2]}: parent solution(s) {missing} are neither in the directory nor "
                "in the database; import the full trace set"
            )
        pending = deferred
    return ids, id_of_name


def _import_traces(
    store: KernelStore,
    root: Path,
    ids: _SolutionIds,
    id_of_name: dict[tuple[str, str], str],
    counts: TransferCounts,
) -> None:
    for path in sorted((root / "traces").rglob("*.jsonl")):
        for number, row in _read_jsonl(path):
            where = f"{path}:{number}"
            extra = row.pop(EXTRA_KEY, None) or {}
            trace = _validate(Trace, row, where)
            if trace.is_workload_trace:
                _require_definition(store, trace.definition, where)
                store.upsert_workload(trace.definition, trace.workload)
                counts.workloads += 1
                continue
            solution_id = ids.by_key.get(
                (trace.definition, extra.get("solution_hash", ""))
            ) or id_of_name.get((trace.definition, trace.solution or ""))
            if solution_id is None:
                raise TraceSetError(
                    f"{where}: trace of solution {trace.solution!r}, which is not in solutions/"
                )
            if trace.evaluation is None:
                raise TraceSetError(f"{where}: a trace with a solution needs an evaluation")
            _require_definition(store, trace.definition, where)
            store.upsert_workload(trace.definition, trace.workload)
            config = extra.get("benchmark_config") or {}
            for measurement in _measurements(extra, trace.evaluation, where):
                store.upsert_profile(trace.workload.uuid, solution_id, measurement, config)
                counts.measurements += 1
            counts.profiles += 1


def _measurements(extra: dict[str, Any], pooled: Evaluation, where: str) -> list[Evaluation]:
    """The measurements a trace line carries, oldest first; the line's own evaluation when it
    carries none (a file of flashinfer-bench's, or exported before measurements were kept)."""
    listed = extra.get("measurements")
    if not listed:
        return [Evaluation.model_validate(pooled.model_dump())]
    if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
        raise TraceSetError(f"{where}: accelopt.measurements must be a list of evaluations")
    return [_validate(Evaluation, m, f"{where} (measurement {i})") for i, m in enumerate(listed)]


def _import_engine_records(
    store: KernelStore, root: Path, ids: _SolutionIds, counts: TransferCounts
) -> None:
    side = root / EXTRA_KEY

    def solution_id(row: dict[str, Any], role: str) -> str | None:
        """The id a `<role>_hash` (and `<role>_definition`) reference names, both popped."""
        definition = row.pop(f"{role}_definition", None)
        return ids.find(row.pop(f"{role}_hash", None), definition, row.get("definition_name", ""))

    new_runs: set[str] = set()
    if (side / "runs.jsonl").exists():
        for number, row in _read_jsonl(side / "runs.jsonl"):
            row["initial_solution_id"] = solution_id(row, "initial_solution")
            row["best_solution_id"] = solution_id(row, "best_solution")
            run = _validate(RunRecord, row, f"{side / 'runs.jsonl'}:{number}")
            if store.get_run(run.id) is None:
                store.create_run(run)
                new_runs.add(run.id)
            store.update_run(
                run.id,
                RunUpdate.model_validate(run.model_dump(include=set(RunUpdate.model_fields))),
            )
            counts.runs += 1

    if (side / "experiences.jsonl").exists():

        def key(item: ExperienceIn) -> tuple[Any, ...]:
            return (
                item.run_id,
                item.namespace,
                item.definition_name,
                item.title,
                item.strategy,
                item.pseudocode,
            )

        existing = {key(e) for e in store.search_experiences(include_removed=True, limit=1_000_000)}
        for number, row in _read_jsonl(side / "experiences.jsonl"):
            row["slow_solution_id"] = solution_id(row, "slow_solution")
            row["fast_solution_id"] = solution_id(row, "fast_solution")
            item = _validate(ExperienceIn, row, f"{side / 'experiences.jsonl'}:{number}")
            if key(item) in existing:
                continue
            new_id = store.add_experience(item)
            if row.get("removed"):
                store.remove_experience(new_id)
            counts.experiences += 1

    # A run's LLM calls come with the run: a run that was already stored keeps its own.
    if (side / "llm_calls.jsonl").exists():
        for number, row in _read_jsonl(side / "llm_calls.jsonl"):
            call = _validate(LlmCallIn, row, f"{side / 'llm_calls.jsonl'}:{number}")
            if call.run_id is not None and call.run_id not in new_runs:
                continue
            store.add_llm_call(call)
            counts.llm_calls += 1

    if (side / "suites.jsonl").exists():
        for number, row in _read_jsonl(side / "suites.jsonl"):
            for figures in _suite_kernels(row):
                figures["solution_id"] = solution_id(figures, "solution")
            suite = _validate(SuiteRecord, row, f"{side / 'suites.jsonl'}:{number}")
            if store.get_suite(suite.id) is None:
                store.put_suite(suite)
                counts.suites += 1

    # A run's checkpoint entries (its attempts, plans) come with the run too.
    if (side / "run_entries.jsonl").exists():
        for number, row in _read_jsonl(side / "run_entries.jsonl"):
            entry = _validate(RunEntry, row, f"{side / 'run_entries.jsonl'}:{number}")
            if entry.run_id not in new_runs:
                continue
            store.put_run_entry(entry.run_id, entry.kind, entry.key, entry.data)
            counts.run_entries += 1
