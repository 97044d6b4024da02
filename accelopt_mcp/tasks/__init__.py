"""Task formats (NKIBench numpy modules, FlashInfer-Bench JSON) mapped onto our records.

Kept import-light: the profiling child imports `accelopt_mcp.tasks.inputs` and must not pay
for pydantic.
"""
