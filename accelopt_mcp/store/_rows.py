"""Row <-> record conversion shared by the stores that keep schema_v2's tables.

One serialization rule everywhere: a record is stored as the JSON of the fields that were set
(`model_dump_json(exclude_unset=True)`, NaN/inf as the model's config says), as flashinfer-bench
and AccelOpt write them; reading a row back gives a record equal to the one stored.

Row readers take any mapping of column name -> value, as SQLite (JSON text, ISO timestamps),
psycopg (dicts, datetimes) or PostgREST (dicts, ISO timestamps) return it; `prefix` selects
the columns of one table out of a joined row (e.g. "s_" for `s.id AS s_id`).
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from accelopt_mcp.models import (
    Definition,
    Evaluation,
    LlmCallIn,
    LlmMessage,
    MeasuringConditions,
    Solution,
    Workload,
)
from accelopt_mcp.redaction import mask_secrets, redact
from accelopt_mcp.store import _retry
from accelopt_mcp.store._checks import MAX_LEASE_S as MAX_LEASE_S
from accelopt_mcp.store._checks import MIN_ID_PREFIX as MIN_ID_PREFIX
from accelopt_mcp.store._checks import canonical_uuid as canonical_uuid
from accelopt_mcp.store._checks import check_lease as check_lease
from accelopt_mcp.store._checks import check_limit as check_limit
from accelopt_mcp.store._checks import check_statuses as check_statuses
from accelopt_mcp.store._checks import check_strings as check_strings
from accelopt_mcp.store._checks import id_prefix as id_prefix
from accelopt_mcp.store._checks import plain_json as plain_json
from accelopt_mcp.store._checks import require as require
from accelopt_mcp.store._checks import require_str as require_str
from accelopt_mcp.store.base import (
    ConflictError,
    ExperienceRecord,
    HardwarePeaksRecord,
    LlmCallRecord,
    RankedSolution,
    RunEntry,
    RunRecord,
    StoredDefinition,
    StoredMeasurement,
    StoredProfile,
    StoredSolution,
    StoredWorkload,
    SuiteRecord,
    UnknownReferenceError,
)

ModelT = TypeVar("ModelT", bound=BaseModel)

TABLES = (
    "definitions",
    "workloads",
    "solutions",
    "profiles",
    "measurements",
    "runs",
    "experiences",
    "llm_calls",
    "run_entries",
    "suites",
)
"""The record tables: what stats() counts."""
CACHE_TABLES = ("hardware_peaks",)
"""Tables of figures measured on this host and kept to save measuring again; not records, so
stats() leaves them out (a copied database would count them differently)."""
SCHEMA_TABLES = (*TABLES, *CACHE_TABLES)
"""Every table of the schema: what a store checks is there."""

DEFINITION_COLUMNS = ("name", "definition", "created_at")
WORKLOAD_COLUMNS = ("uuid", "definition_name", "workload", "created_at")
SOLUTION_COLUMNS = (
    "id",
    "definition_name",
    "parent_id",
    "solution",
    "hash_version",
    "solution_hash",
    "evolve_metadata",
    "spec_language",
    "author",
    "created_at",
)
PROFILE_COLUMNS = (
    "id",
    "workload_uuid",
    "solution_id",
    "evaluation",
    "benchmark_config",
    "benchmark_config_hash",
    "eval_status",
    "eval_hardware",
    "latency_ms",
    "reference_latency_ms",
    "speedup",
    "created_at",
)
MEASUREMENT_COLUMNS = ("id", "profile_id", "evaluation", "created_at")
RUN_COLUMNS = tuple(RunRecord.model_fields)
EXPERIENCE_COLUMNS = tuple(ExperienceRecord.model_fields)
LLM_CALL_TEXT_COLUMNS = ("messages", "reply")
"""Compressed columns: read by get_llm_call only."""
LLM_CALL_COLUMNS = tuple(c for c in LlmCallRecord.model_fields if c not in LLM_CALL_TEXT_COLUMNS)
LLM_CALL_DETAIL_COLUMNS = (*LLM_CALL_COLUMNS, *LLM_CALL_TEXT_COLUMNS)
LLM_CALL_KEEP_WHEN_NONE = ("purpose", "started_at", "finished_at", "messages", "reply")
"""Columns an update of a ledger row leaves as stored when the update gives None."""
RUN_ENTRY_COLUMNS = tuple(RunEntry.model_fields)
HARDWARE_PEAKS_COLUMNS = tuple(HardwarePeaksRecord.model_fields)
SUITE_COLUMNS = tuple(SuiteRecord.model_fields)
INTERRUPTED_ERROR = (
    "interrupted: its worker stopped before the reply came (found in flight when the run was "
    "taken over); tokens and cost are the prompt's estimate"
)


# --------------------------------------------------------------------------- input checks


def new_uuid() -> str:
    """A new key; inside a retried store operation the same on every attempt (_retry)."""
    return _retry.replayed_id(lambda: str(uuid.uuid4()))


def new_text_id() -> str:
    """Key of a run, experience or ledger row (replayed on a retry, as new_uuid)."""
    return _retry.replayed_id(lambda: uuid.uuid4().hex)


def redacted_text(text: str | None, secrets: tuple[str | None, ...] = ()) -> str | None:
    """An error text as it is stored: secrets masked (evaluation logs: Evaluation.redacted)."""
    return redact(text, secrets) if text else text


def require_key(value: object, what: str) -> str:
    """A run entry's kind or key: a non-empty string."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty string, got {value!r}")
    return value


def run_entry_json(run_id: str, kind: str, key: str, data: dict[str, Any]) -> str:
    """put_run_entry's arguments checked, and its data as the JSON text that is stored."""
    check_strings(run_id=run_id)
    require_key(kind, "kind")
    require_key(key, "key")
    return plain_json(data, "run entry data")


# --------------------------------------------------------------------------- llm audit trail


def pack_text(text: str | None) -> bytes | None:
    """A prompt or reply as stored: UTF-8, zlib-compressed."""
    return None if text is None else zlib.compress(text.encode("utf-8"), 6)


def unpack_text(value: Any) -> str | None:
    """A compressed column's value back to text: bytes (SQLite BLOB), memoryview or bytes
    (psycopg BYTEA), or PostgREST's hex text of a BYTEA ("\\x789c...")."""
    if value is None:
        return None
    if isinstance(value, str):
        value = bytes.fromhex(value[2:] if value.startswith("\\x") else value)
    return zlib.decompress(bytes(value)).decode("utf-8")


def bytea_text(data: bytes | None) -> str | None:
    """Bytes as PostgREST takes them for a BYTEA column: PostgreSQL's hex input format."""
    return None if data is None else "\\x" + data.hex()


def stored_messages(call: LlmCallIn, secrets: tuple[str | None, ...]) -> bytes | None:
    """A call's prompt as stored: each message redacted, the list as JSON, compressed."""
    if call.messages is None:
        return None
    rows = [{"role": m.role, "content": mask_secrets(m.content, secrets)} for m in call.messages]
    return pack_text(json.dumps(rows, ensure_ascii=False))


def stored_reply(call: LlmCallIn, secrets: tuple[str | None, ...]) -> bytes | None:
    return pack_text(None if call.reply is None else mask_secrets(call.reply, secrets))


def llm_call_values(
    call: LlmCallIn,
    secrets: tuple[str | None, ...],
    *,
    timestamp: Callable[[datetime | None], Any],
    blob: Callable[[bytes | None], Any],
) -> dict[str, Any]:
    """A ledger row's columns as every store writes them: the call's id (a new one where it
    has none), error redacted, prompt and reply masked and compressed. timestamp/blob: how
    the store's driver takes a timestamp and the compressed bytes (a parameter as is, ISO
    text, PostgREST's hex)."""
    return {
        "id": call.id or new_text_id(),
        "run_id": call.run_id,
        "role": call.role,
        "model": call.model,
        "tokens_in": call.tokens_in,
        "tokens_out": call.tokens_out,
        "latency_s": call.latency_s,
        "cost_usd": call.cost_usd,
        "ok": call.ok,
        "error": redacted_text(call.error, secrets),
        "status": call.status,
        "purpose": call.purpose,
        "started_at": timestamp(call.started_at),
        "finished_at": timestamp(call.finished_at),
        "messages": blob(stored_messages(call, secrets)),
        "reply": blob(stored_reply(call, secrets)),
    }


def messages_from_column(value: Any) -> list[LlmMessage] | None:
    text = unpack_text(value)
    if text is None:
        return None
    return [LlmMessage.model_validate(m) for m in json.loads(text)]


# --------------------------------------------------------------------------- record -> JSON


def record_json(record: BaseModel) -> str:
    """The stored JSON of a record: the fields that were set, as flashinfer-bench writes its
    files and AccelOpt its rows, so a record exported from the database is byte-for-byte the
    file it was imported from."""
    return record.model_dump_json(exclude_unset=True)


def workload_trace_json(definition_name: str, workload: Workload) -> str:
    """A workload Trace, as AccelOpt's `workloads.workload` column holds it."""
    return json.dumps(
        {"definition": definition_name, "workload": json.loads(record_json(workload))}
    )


def conditions_json(conditions: MeasuringConditions | None) -> str | None:
    """The stored JSON of an item's measuring conditions (the fields that are known); None
    (SQL NULL) for none."""
    if conditions is None:
        return None
    return conditions.model_dump_json(exclude_none=True)


# --------------------------------------------------------------------------- row -> record


def _json(value: Any) -> Any:
    if isinstance(value, str | bytes | bytearray):
        return json.loads(value)
    return value


def _record(model: type[ModelT], value: Any) -> ModelT:
    """A record from its column: JSON text (SQLite; PostgreSQL, whose store reads JSONB as
    text) is parsed and validated in one pass by pydantic, about three times faster than
    json.loads and then model_validate; that counted for the 50 solutions of a lineage."""
    if isinstance(value, str | bytes | bytearray):
        return model.model_validate_json(value)
    return model.model_validate(value)


def _timestamp(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _json_object(value: Any) -> Any:
    """A JSON object column; {} for NULL (or an empty value)."""
    return _json(value) or {}


Converters = Mapping[str, Callable[[Any], Any]]
"""How a table's columns are read: column -> converter; a column not named is taken as is."""


def _converted(
    row: Mapping[str, Any], prefix: str, columns: tuple[str, ...], convert: Converters
) -> dict[str, Any]:
    """The row's `columns` (each read as `prefix` + column), converted."""
    values = {c: row[prefix + c] for c in columns}
    for column, how in convert.items():
        values[column] = how(values[column])
    return values


_DEFINITION: Converters = {
    "definition": lambda v: Definition.model_validate(_json(v)),
    "created_at": _timestamp,
}
_WORKLOAD: Converters = {
    "workload": lambda v: Workload.model_validate(_json(v)["workload"]),
    "created_at": _timestamp,
}
_SOLUTION: Converters = {
    "id": str,
    "parent_id": _id,
    "solution": lambda v: _record(Solution, v),
    "hash_version": int,
    "evolve_metadata": _json_object,
    "created_at": _timestamp,
}
_PROFILE: Converters = {
    "id": str,
    "solution_id": str,
    "evaluation": lambda v: _record(Evaluation, v),
    "benchmark_config": _json_object,
    "latency_ms": _float,
    "reference_latency_ms": _float,
    "speedup": _float,
    "created_at": _timestamp,
}
_MEASUREMENT: Converters = {
    "id": str,
    "profile_id": str,
    "evaluation": lambda v: _record(Evaluation, v),
    "created_at": _timestamp,
}
_RUN: Converters = {
    "config": _json_object,
    "initial_solution_id": _id,
    "best_solution_id": _id,
    "created_at": _timestamp,
    "updated_at": _timestamp,
    "lease_expires_at": _timestamp,
}
_EXPERIENCE: Converters = {
    "slow_solution_id": _id,
    "fast_solution_id": _id,
    "removed": bool,
    "created_at": _timestamp,
    "conditions": _json,
}
_LLM_CALL: Converters = {
    "id": str,
    "ok": bool,
    "created_at": _timestamp,
    "started_at": _timestamp,
    "finished_at": _timestamp,
}
_RUN_ENTRY: Converters = {"data": _json_object, "updated_at": _timestamp}
_HARDWARE_PEAKS: Converters = {"peaks": _json, "measured_at": _timestamp}
_SUITE: Converters = {"spec": _json_object, "created_at": _timestamp, "updated_at": _timestamp}


def definition_from_row(row: Mapping[str, Any], prefix: str = "") -> StoredDefinition:
    return StoredDefinition.model_validate(_converted(row, prefix, DEFINITION_COLUMNS, _DEFINITION))


def workload_from_row(row: Mapping[str, Any], prefix: str = "") -> StoredWorkload:
    return StoredWorkload.model_validate(_converted(row, prefix, WORKLOAD_COLUMNS, _WORKLOAD))


def solution_from_row(row: Mapping[str, Any], prefix: str = "") -> StoredSolution:
    return StoredSolution.model_validate(_converted(row, prefix, SOLUTION_COLUMNS, _SOLUTION))


def profile_from_row(row: Mapping[str, Any], prefix: str = "") -> StoredProfile:
    return StoredProfile.model_validate(_converted(row, prefix, PROFILE_COLUMNS, _PROFILE))


def ranked_from_row(row: Mapping[str, Any]) -> RankedSolution:
    """A ranking's winner from the SQL stores' join: the solution's columns prefixed `s_`,
    its fastest profile's `p_`."""
    return RankedSolution(
        solution=solution_from_row(row, "s_"), profile=profile_from_row(row, "p_")
    )


def measurement_from_row(row: Mapping[str, Any], prefix: str = "") -> StoredMeasurement:
    return StoredMeasurement.model_validate(
        _converted(row, prefix, MEASUREMENT_COLUMNS, _MEASUREMENT)
    )


def evaluation_from_json(value: Any) -> Evaluation:
    """An evaluation column's value (JSON text or a decoded JSONB value) as a record."""
    return _record(Evaluation, value)


def same_measurement(a: Evaluation, b: Evaluation) -> bool:
    """True when two evaluations say the same thing, field for field (defaults included, key
    order and NaN aside): the same measurement sent twice, not a re-measurement, which always
    differs at least in its timestamp."""
    return bool(_canonical(a) == _canonical(b))


def _canonical(evaluation: Evaluation) -> Any:
    # Through JSON text: NaN becomes a string there, which compares equal to itself.
    return json.loads(evaluation.model_dump_json())


def run_from_row(row: Mapping[str, Any]) -> RunRecord:
    return RunRecord.model_validate(_converted(row, "", RUN_COLUMNS, _RUN))


def experience_from_row(row: Mapping[str, Any]) -> ExperienceRecord:
    return ExperienceRecord.model_validate(_converted(row, "", EXPERIENCE_COLUMNS, _EXPERIENCE))


def llm_call_from_row(row: Mapping[str, Any], *, detail: bool = False) -> LlmCallRecord:
    """A ledger row; with `detail`, its prompt and reply too (the row holds
    LLM_CALL_DETAIL_COLUMNS)."""
    r = _converted(row, "", LLM_CALL_COLUMNS, _LLM_CALL)
    # A row an older accelopt wrote after the migration gets the default status 'ok'.
    if r["status"] in (None, "ok") and not r["ok"]:
        r["status"] = "failed"
    if detail:
        r["messages"] = messages_from_column(row["messages"])
        r["reply"] = unpack_text(row["reply"])
    return LlmCallRecord.model_validate(r)


def run_entry_from_row(row: Mapping[str, Any]) -> RunEntry:
    return RunEntry.model_validate(_converted(row, "", RUN_ENTRY_COLUMNS, _RUN_ENTRY))


def hardware_peaks_from_row(row: Mapping[str, Any]) -> HardwarePeaksRecord:
    return HardwarePeaksRecord.model_validate(
        _converted(row, "", HARDWARE_PEAKS_COLUMNS, _HARDWARE_PEAKS)
    )


def suite_from_row(row: Mapping[str, Any]) -> SuiteRecord:
    return SuiteRecord.model_validate(_converted(row, "", SUITE_COLUMNS, _SUITE))


def sorted_entries(entries: list[RunEntry]) -> list[RunEntry]:
    """Kind, then key, in code-point order (a database's collation may sort otherwise)."""
    return sorted(entries, key=lambda e: (e.kind, e.key))


def timestamp_text(value: datetime | None) -> str | None:
    """A timestamp as SQLite and PostgREST take it: ISO 8601 in UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- messages


def unknown_definition(name: str) -> str:
    return (
        f"definition {name!r} is not stored; store it first with upsert_definition "
        "(or `accelopt db import`)"
    )


def unknown_solution(solution_id: str, role: str = "solution") -> str:
    return f"{role} {solution_id!r} is not a stored solution id; store that solution first"


def unknown_workload(workload_uuid: str) -> str:
    return f"workload {workload_uuid!r} is not stored; store it first with upsert_workload"


def check_workload_definition(
    workload_uuid: str, stored: Mapping[str, Any], definition_name: str
) -> None:
    """ConflictError when the stored row of the workload (its `definition_name`) belongs to
    another definition than the one it is being stored under."""
    if stored["definition_name"] != definition_name:
        raise ConflictError(
            f"workload {workload_uuid!r} is stored under definition "
            f"{stored['definition_name']!r}, not {definition_name!r}; a workload uuid "
            "names one workload of one definition, so give this one a new uuid"
        )


def unknown_run(run_id: str) -> str:
    return f"run {run_id!r} is not stored; create it first with create_run"


def reference_error(detail: str) -> UnknownReferenceError:
    """A foreign-key failure the database reported (its own words in `detail`) where no
    check before the write named the missing record."""
    return UnknownReferenceError(
        f"a referenced definition, workload, solution or run is not stored ({detail})"
    )


def conflict_error(detail: str) -> ConflictError:
    """A uniqueness failure the database reported (its own words in `detail`)."""
    return ConflictError(f"the record collides with a stored one ({detail})")


SOLUTIONS_PER_DEFINITION = (
    "solutions: uniqueness now per definition (same source may serve several definitions)"
)
"""What `accelopt db init` says when it widened an older database's solutions key."""


def lease_lost(run_id: str, holder: str, current: Mapping[str, Any]) -> str:
    held_by = current["worker_id"]
    if held_by != holder:
        return (
            f"run {run_id} is now held by worker {held_by or 'none'}, not {holder}: this worker's "
            "lease ran out and another took the run over; it must stop writing to it"
        )
    return (
        f"run {run_id} is {current['status']}, set by another process while worker {holder} "
        "held it (e.g. cancelled from another server); this worker must stop"
    )
