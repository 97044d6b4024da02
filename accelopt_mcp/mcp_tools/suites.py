"""Suite tools: a whole benchmark (one optimization per task) as one background process, and
its percent-of-peak table so far. The suite's driver runs in a process of its own (python -m
accelopt_mcp.suites), each case as an optimization job, so it outlives the request; the table
is read from the database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.engine.runs import default_output_dir, local_worker_gone
from accelopt_mcp.llm import LlmConfigError, load_role_configs
from accelopt_mcp.llm.key_destinations import require_trusted_destinations
from accelopt_mcp.llm.preflight import check_endpoints_now, roles_used
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.run_params import confined_run_files, require_config_checked
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import View
from accelopt_mcp.store import STORE_ENV
from accelopt_mcp.store.base import SuiteRecord
from accelopt_mcp.suites import builtin_suite
from accelopt_mcp.suites.report import suite_json
from accelopt_mcp.suites.runner import create_suite, spec_of

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
SUITE_HINT = "start_suite returns a suite's id; `accelopt suite list` shows them"

SuiteId = Annotated[str, Field(description="start_suite's id (or its 8+ first characters).")]


class SuiteView(View):
    """A suite and its table so far."""

    suite_id: str
    name: str
    status: str
    """running, completed, cancelled, or interrupted (its driver stopped: `accelopt suite
    resume` goes on; suite_status starts a new driver for a running suite whose one died)."""
    tasks: list[dict[str, Any]]
    """Per task case: baseline and best (latency_ms, percent_of_peak), speedup over the
    baseline with its interval, LLM calls, tokens, cost, wall time, how it ended, and why it
    is excluded from the means (above 100% of peak) where it is."""
    geomean: dict[str, Any]
    about: dict[str, str]
    """Hardware, peaks, settings, models and code version."""
    next: str | None = None


def _view(record: SuiteRecord, next_step: str | None = None) -> SuiteView:
    data = suite_json(record)
    return SuiteView(
        suite_id=record.id,
        name=record.name,
        status=record.status,
        tasks=data["tasks"],
        geomean=data["geomean"],
        about=data["about"],
        next=next_step,
    )


def _record(ctx: ToolContext, given: str) -> SuiteRecord:
    """The suite `given` names (its id, or a unique prefix), through the one id resolver."""
    store = state_of(ctx).store()
    record = store.get_suite(ids.resolve(store, "suite", given.strip(), hint=SUITE_HINT))
    if record is None:  # removed in between
        raise NotFoundError(f"no suite with id {given!r}; {SUITE_HINT}")
    return record


def _start_driver(ctx: ToolContext, suite_id: str) -> None:
    state = state_of(ctx)
    output_dir = state.jobs_output_dir or default_output_dir()
    folder = output_dir / "suites" / suite_id
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if state.store_url:
        env[STORE_ENV] = state.store_url
    with (folder / "driver.log").open("ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "accelopt_mcp.suites", suite_id, str(output_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # outlives the server's request and the server
        )


def start_suite(
    ctx: ToolContext,
    directory: Annotated[
        str | None, Field(description="NKIBench folder or FlashInfer-Trace set.")
    ] = None,
    builtin: Annotated[str | None, Field(description="Or a shipped suite: cpu-nkibench.")] = None,
    preset: Annotated[
        str, Field(description=f"{', '.join(PRESETS)}, or a JSON file of run settings.")
    ] = "quick",
    baseline_only: Annotated[bool, Field(description="Profile baselines only, no LLM.")] = False,
    parallel: Annotated[int, Field(ge=1, le=16, description="Tasks at once.")] = 1,
) -> SuiteView:
    """Run a benchmark in the background: baselines, one optimization job per task, then
    percent of peak before and after. Returns at once; poll suite_status."""
    if (directory is None) == (builtin is None):
        raise ValueError("give directory or builtin (e.g. builtin='cpu-nkibench'), not both")
    if builtin is not None:
        root = builtin_suite(builtin)
    else:
        assert directory is not None
        root = state_of(ctx).roots.file_or_dir(directory, "directory")
    preset, models_config = confined_run_files(state_of(ctx).roots, preset, None)
    config = resolve_optimize_config(preset, {"models_config": models_config})
    require_config_checked(preset, models_config, config.models_config)
    if not baseline_only:
        # Refused now, before anything is stored, when a role's LLM cannot serve it: every
        # task's job would end llm_unavailable.
        models = Path(config.models_config) if config.models_config else None
        check_endpoints_now(load_role_configs(models), roles_used(config.summarize))
    record = create_suite(
        state_of(ctx).store(),
        Path(root),
        name=builtin or Path(root).name,
        source=f"builtin:{builtin}" if builtin else str(root),
        config=config,
        preset=preset,
        baseline_only=baseline_only,
        parallel=parallel,
    )
    _start_driver(ctx, record.id)
    return _view(record, "suite_status for the table so far; cancel_suite to stop")


def suite_status(ctx: ToolContext, suite_id: SuiteId) -> SuiteView:
    """A suite's table so far: percent of peak before and after per task, speedups, cost,
    geometric means."""
    record = _record(ctx, suite_id)
    spec = spec_of(record)
    driver = spec.driver
    if record.status == "running" and driver is not None and local_worker_gone(driver):
        if not spec.baseline_only:
            # The stored config was checked where the suite started (if at all: another
            # server, an older version, a row anyone with the database wrote) and is read
            # here from a path that may be a client's file now: the new driver's jobs send
            # this server's keys only where its operator does (llm/key_destinations.py).
            # Refused, the table is still shown, with why no driver was started.
            models = spec.settings.get("models_config")
            try:
                require_trusted_destinations(
                    load_role_configs(Path(models) if models else None),
                    f"suite {record.id}'s model config {models}",
                )
            except (LlmConfigError, OSError) as exc:
                return _view(record, f"its driver had stopped and was not started again: {exc}")
        # Its driver died with the server (or was killed): start another, which finds the
        # runs it had started and goes on.
        _start_driver(ctx, record.id)
        return _view(record, "its driver had stopped and was started again")
    return _view(record)


def cancel_suite(ctx: ToolContext, suite_id: SuiteId) -> SuiteView:
    """Stop a suite: its running jobs are cancelled, no task starts."""
    state = state_of(ctx)
    record = _record(ctx, suite_id)
    record = state.store().put_suite(record.model_copy(update={"status": "cancelled"}))
    jobs = state.jobs()
    for case in spec_of(record).cases:
        if case.run_id is not None and case.ended is None:
            jobs.cancel(case.run_id)
    return _view(record)


TOOLS = [
    Tool.from_function(
        start_suite, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False)
    ),
    Tool.from_function(suite_status, annotations=READ_ONLY),
    Tool.from_function(
        cancel_suite, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True)
    ),
]
