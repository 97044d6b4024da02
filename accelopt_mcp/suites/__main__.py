"""`python -m accelopt_mcp.suites SUITE_ID [OUTPUT_DIR]`: drive a stored suite to its end in a
process of its own (what the MCP tool start_suite starts, so that the suite outlives the
request). The database comes from ACCELOPT_STORE, as a job's worker's does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from accelopt_mcp.engine.runs import default_output_dir
from accelopt_mcp.store import STORE_ENV, open_store
from accelopt_mcp.suites.report import write_outputs
from accelopt_mcp.suites.runner import SuiteDriver


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m accelopt_mcp.suites SUITE_ID [OUTPUT_DIR]", file=sys.stderr)
        return 2
    suite_id = argv[0]
    output_dir = Path(argv[1]) if len(argv) == 2 else default_output_dir()
    store_url = os.environ.get(STORE_ENV)
    store = open_store(store_url)
    try:
        driver = SuiteDriver(
            store,
            suite_id,
            store_url=store_url,
            say=lambda line: print(line, flush=True),
            check_llm=False,
            output_dir=output_dir,
        )
        record = driver.run()
        write_outputs(record, output_dir / "suites" / record.id)
        print(f"suite {record.id} {record.status}", flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
