"""Stand-in for flashinfer-bench 0.1.2 (tests only): what the flashinfer backend's runner calls,
with the real package's behaviour where it matters to the backend: a solution runs in a worker
process of its own (never in the caller's), and the result is a trace set whose Evaluation has
the real schema. Knobs: STANDIN_FIB_LATENCY_MS (default 2.0), STANDIN_FIB_STATUS (default
PASSED; a worker that fails to import the solution gives RUNTIME_ERROR)."""
