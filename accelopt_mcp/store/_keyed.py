"""What the stores over schema_v2's tables (SQLite, PostgreSQL, Supabase) read alike: a record
by its key, given one query (`_row`) from each. Apart from base.py, which cannot import the row
readers (store/_rows.py imports the contract)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import (
    ExperienceRecord,
    HardwarePeaksRecord,
    KernelStore,
    RunRecord,
    StoredDefinition,
    StoredProfile,
    StoredSolution,
    StoredWorkload,
    SuiteRecord,
)

RecordT = TypeVar("RecordT")


class KeyedStore(KernelStore, abc.ABC):
    """KernelStore's reads by key, over schema_v2's tables."""

    @abc.abstractmethod
    def _row(
        self, table: str, key: str, value: str, columns: tuple[str, ...]
    ) -> Mapping[str, Any] | None:
        """The row (these columns) of `table` whose `key` column equals `value`, or None."""

    def _get(
        self,
        table: str,
        key: str,
        value: str,
        columns: tuple[str, ...],
        record: Callable[[Mapping[str, Any]], RecordT],
    ) -> RecordT | None:
        row = self._row(table, key, value, columns)
        return None if row is None else record(row)

    def get_definition(self, name: str) -> StoredDefinition | None:
        _rows.check_strings(name=name)
        return self._get(
            "definitions", "name", name, _rows.DEFINITION_COLUMNS, _rows.definition_from_row
        )

    def get_workload(self, uuid: str) -> StoredWorkload | None:
        _rows.check_strings(uuid=uuid)
        return self._get("workloads", "uuid", uuid, _rows.WORKLOAD_COLUMNS, _rows.workload_from_row)

    def get_solution(self, solution_id: str) -> StoredSolution | None:
        canonical = _rows.canonical_uuid(solution_id)
        if canonical is None:
            return None
        return self._get(
            "solutions", "id", canonical, _rows.SOLUTION_COLUMNS, _rows.solution_from_row
        )

    def get_profile(self, profile_id: str) -> StoredProfile | None:
        canonical = _rows.canonical_uuid(profile_id)
        if canonical is None:
            return None
        return self._get("profiles", "id", canonical, _rows.PROFILE_COLUMNS, _rows.profile_from_row)

    def get_run(self, run_id: str) -> RunRecord | None:
        _rows.check_strings(run_id=run_id)
        return self._get("runs", "id", run_id, _rows.RUN_COLUMNS, _rows.run_from_row)

    def get_experience(self, experience_id: str) -> ExperienceRecord | None:
        _rows.check_strings(experience_id=experience_id)
        return self._get(
            "experiences", "id", experience_id, _rows.EXPERIENCE_COLUMNS, _rows.experience_from_row
        )

    def get_hardware_peaks(self, hardware: str) -> HardwarePeaksRecord | None:
        _rows.check_strings(hardware=hardware)
        return self._get(
            "hardware_peaks",
            "hardware",
            hardware,
            _rows.HARDWARE_PEAKS_COLUMNS,
            _rows.hardware_peaks_from_row,
        )

    def _get_suite(self, suite_id: str) -> SuiteRecord | None:
        return self._get("suites", "id", suite_id, _rows.SUITE_COLUMNS, _rows.suite_from_row)
