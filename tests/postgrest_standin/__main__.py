"""`python -m tests.postgrest_standin`: serve the PostgREST stand-in for tests over HTTP.

The API key comes from POSTGREST_STANDIN_KEY (never from the command line, where `ps` shows it).
Faults can be injected at run time through /_standin/faults (faults.py).
"""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn

from tests.postgrest_standin.app import create_app
from tests.postgrest_standin.faults import FaultInjector

KEY_ENV = "POSTGREST_STANDIN_KEY"
DSN_ENV = "POSTGREST_STANDIN_DSN"
ROLE_ENV = "POSTGREST_STANDIN_ROLE"
"""The database role every request runs as (e.g. anon); unset: the DSN's user."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.postgrest_standin",
        description="PostgREST stand-in for tests: serves /rest/v1 over a PostgreSQL database.",
    )
    parser.add_argument("--dsn", default=os.environ.get(DSN_ENV), help=f"default: ${DSN_ENV}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    key = os.environ.get(KEY_ENV, "")
    if not key:
        print(f"set {KEY_ENV} to the API key the stand-in should accept", file=sys.stderr)
        return 2
    if not args.dsn:
        print(f"give --dsn or set {DSN_ENV}", file=sys.stderr)
        return 2
    app = FaultInjector(create_app(args.dsn, key, os.environ.get(ROLE_ENV) or None), key)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
