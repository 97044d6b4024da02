"""What the viewer's JSON endpoints return: the store read into pydantic views, one module a
page.

- `base`: the base of every view, `NotFound`, reading a run leniently, a kernel's profile.
- `runs`: the runs page (`list_runs`, one row a run).
- `run`: the run page (`run_detail`: its iterations, nodes, edges and ties).
- `node`: the node panel (`node_detail`: code, diff, profiles, calls, lessons; `call_detail`).
- `memory`, `suites`: the memory and the suites pages.

Every figure is worded by `comparing` (a median with its interval, a speedup with its interval
and against what), as the CLI and the MCP tools word it. A run whose row is broken or half
written (its config without settings, an entry that no longer validates, a parent that is not
stored) is shown with what could be read; `problems` says, one line each, what could not.
Nothing here raises on a bad row: only an unknown id (`NotFound`) or a store error does.
"""

from accelopt_mcp.viewer.views.base import NotFound, View
from accelopt_mcp.viewer.views.memory import memory_page
from accelopt_mcp.viewer.views.node import call_detail, node_detail
from accelopt_mcp.viewer.views.run import run_detail
from accelopt_mcp.viewer.views.runs import RunRow, list_runs
from accelopt_mcp.viewer.views.suites import suites_page

__all__ = [
    "NotFound",
    "RunRow",
    "View",
    "call_detail",
    "list_runs",
    "memory_page",
    "node_detail",
    "run_detail",
    "suites_page",
]
