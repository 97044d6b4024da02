"""The cpu harness starts a fresh interpreter for every evaluation, so what it imports is part
of every evaluation's overhead: its entry module, and everything it imports while it runs,
must leave pydantic unloaded (about 0.15 s of start-up)."""

from __future__ import annotations

import subprocess
import sys

HARNESS_MODULES = (
    # The entry point, and with it the session, the runner protocol and the comparisons.
    "accelopt_mcp.backends.cpu_runner",
    # Imported inside functions once an evaluation runs: the task's jail, its jailed side,
    # the jails themselves, the input drawing and the statistics.
    "accelopt_mcp.backends.cpu_task",
    "accelopt_mcp.backends.cpu_task_harness",
    "accelopt_mcp.isolation.jail",
    "accelopt_mcp.isolation.sandbox",
    "accelopt_mcp.tasks.inputs",
    "accelopt_mcp.stats",
)


def _loaded_after_importing(modules: tuple[str, ...]) -> set[str]:
    code = (
        "import importlib, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(done.stdout.split())


def test_the_harness_entry_module_loads_no_pydantic() -> None:
    loaded = _loaded_after_importing(HARNESS_MODULES[:1])
    assert "accelopt_mcp.backends.cpu_session" in loaded
    assert "pydantic" not in loaded


def test_what_an_evaluation_imports_loads_no_pydantic() -> None:
    loaded = _loaded_after_importing(HARNESS_MODULES)
    assert "accelopt_mcp.isolation.jail" in loaded
    assert "pydantic" not in loaded
