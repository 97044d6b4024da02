"""accelopt-mcp: AccelOpt-style kernel optimization behind an MCP server.

Imports run one way, from the front ends down to the records. `LAYERS` below is the order,
lowest first; a module may import its own package and anything in a lower layer, never a peer
in its own layer or anything above (tests/test_layers.py enforces it, and that the module graph
has no cycles). A new top-level module or package gets a place here first.
"""

__version__ = "0.1.0"

LAYERS: tuple[tuple[str, ...], ...] = (
    # Foundations: parsing source text safely from threads; child processes with limits;
    # masking secrets in messages; statistics of timings (medians, intervals, pooling).
    ("pysource", "isolation", "redaction", "stats"),
    # Records: Definition, Workload, Solution, Evaluation, Trace, Task, BenchmarkConfig...
    ("models",),
    # The hashes that identify records (dedup in every store).
    ("hashing",),
    # Task and kernel formats (NKIBench modules, FlashInfer-Trace files) read into records.
    ("tasks",),
    # Peers that know nothing of each other: the kernel database, the LLM client, the
    # profiling backends.
    ("store", "llm", "backends"),
    # Whole directories in and out of a store; the rules for linking a kernel to what is
    # stored (filling a missing parent or name, refusing a contradiction).
    ("transfer", "linking"),
    # Comparing kernels against each other, and how measured figures read wherever they are
    # shown (prompts, tools, commands): below the engine, whose prompts show them.
    ("comparing",),
    # The AccelOpt loop (and its jobs), and profiling one kernel into the store.
    ("engine", "profiling"),
    # Benchmark suites: one optimization per task of a benchmark, and its percent-of-peak
    # table (the built-in CPU NKIBench ships here too).
    ("suites",),
    # The web viewer of the kernel database (`accelopt view`): pages over the layers below,
    # served on loopback; the front ends start it and link to it.
    ("viewer",),
    # Front ends: the `accelopt` command and the MCP tools, thin shells over the layers below;
    # writing the skill and a project's .mcp.json for an agent (it imports nothing of ours).
    ("cli", "mcp_tools", "install_skill"),
    # The MCP server's transports (stdio, HTTP); nothing imports it.
    ("server",),
)
