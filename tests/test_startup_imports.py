"""What every `accelopt` command and every MCP server pays at start-up: the OpenAI SDK (about
half a second to import) is loaded where an LLM is called or checked, never by the command
table, the server or a job worker's module (a command that profiles or reads the database
never needs it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

STARTS = {
    "the accelopt command table": (
        "from accelopt_mcp.cli import _register\n_register()\n"
        "import accelopt_mcp.llm.preflight, accelopt_mcp.llm.client\n"
    ),
    "the MCP server": "import accelopt_mcp.server\n",
    "a job worker": "import accelopt_mcp.engine.worker\n",
}


@pytest.mark.parametrize("what", sorted(STARTS))
def test_starting_does_not_import_the_openai_sdk(what: str) -> None:
    code = STARTS[what] + "import sys\nprint('openai' in sys.modules)\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False", f"{what} imports openai"


def test_a_check_still_finds_the_sdk_when_it_runs() -> None:
    # The imports moved into the functions: what uses them must still resolve them.
    code = (
        "import sys\n"
        "from accelopt_mcp.llm import preflight\n"
        "print(preflight._connection_problem(ValueError('x')))\n"
        "print('openai' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split()[-1] == "True" and "unreachable (x)" in done.stdout
