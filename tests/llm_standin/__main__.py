"""Entry point: python -m tests.llm_standin --script script.json [--port 0]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.llm_standin.script import StandinScript
from tests.llm_standin.server import make_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.llm_standin")
    parser.add_argument("--script", type=Path, required=True, help="fixture script (JSON)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = make_server(StandinScript.load(args.script), args.host, args.port)
    host, port = server.server_address[:2]
    print(f"STANDIN LISTENING http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
