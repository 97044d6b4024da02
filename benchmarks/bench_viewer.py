"""How fast the viewer shows a large run: a run of 500 kernels, opened in a real headless
chromium (the system's), from the request of the page to the last node drawn.

    .venv/bin/python benchmarks/bench_viewer.py [--kernels 500] [--iterations 10] [--repeat 5]

A synthetic run (tests/viewer/synthetic.py: kernels in chains with siblings, profiles with
intervals and breakdowns, ties, a flagged and a failed kernel) is written into a fresh SQLite
file; `accelopt view` serves it (a subprocess); each repeat opens the run's page in a fresh
tab and waits until every node is in the page. Printed: the median and worst of
  - page: from navigation to the last node drawn (what a person waits for),
  - api: the server's answer for the run (/api/run/<id>, read afresh each time),
  - fetch: the same answer as the page waited for it (its own request),
  - render: the front end's drawing of the tree and chart (window.__viewerTimings).
The claim is page < 1 s for 500 kernels. Needs chromium (apt-get install chromium) and
playwright (pip install -e '.[dev]').
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.engine.conftest import KERNEL_PATH, TASK_PATH
from tests.viewer.conftest import CHROMIUM_ARGS, ViewerProcess
from tests.viewer.synthetic import write_run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed: apt-get install chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    path = folder / "kernels.db"
    task = load_task(TASK_PATH)
    base = load_solution(KERNEL_PATH, task)
    started = time.perf_counter()
    with SqliteStore(path) as store:
        made = write_run(store, task, base, kernels=args.kernels, iterations=args.iterations)
    print(f"wrote a run of {args.kernels} kernels in {time.perf_counter() - started:.1f} s")
    pages: list[float] = []
    apis: list[float] = []
    renders: list[float] = []
    fetches: list[float] = []
    with ViewerProcess(str(path)) as viewer, sync_playwright() as playwright:
        headers = {"Authorization": f"Bearer {viewer.token}"}
        for _ in range(args.repeat):
            began = time.perf_counter()
            answer = httpx.get(f"{viewer.base}/api/run/{made.run_id}", headers=headers, timeout=60)
            answer.raise_for_status()
            apis.append(time.perf_counter() - began)
            time.sleep(1.1)  # past the server's one-second cache: every repeat reads afresh
        nodes = len(answer.json()["nodes"])
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        first = context.new_page()
        first.goto(viewer.url)
        for _ in range(args.repeat):
            tab = context.new_page()
            time.sleep(1.1)
            began = time.perf_counter()
            tab.goto(f"{viewer.base}/run/{made.run_id}")
            # A selector, not a script: the page's policy allows no eval.
            tab.locator("[data-solution-id]").nth(nodes - 1).wait_for(
                state="attached", timeout=60_000
            )
            pages.append(time.perf_counter() - began)
            timings = tab.evaluate("window.__viewerTimings")
            renders.append(timings["render_ms"] / 1e3)
            fetches.append(timings["fetch_ms"] / 1e3)
            tab.close()
        browser.close()
    print(f"run of {nodes} nodes ({args.kernels} kernels of the run), {args.repeat} repeats:")
    for name, values in (
        ("page", pages),
        ("api", apis),
        ("fetch", fetches),
        ("render", renders),
    ):
        print(
            f"  {name:<7} median {statistics.median(values) * 1e3:7.0f} ms, "
            f"worst {max(values) * 1e3:7.0f} ms"
        )
    verdict = "under" if statistics.median(pages) < 1.0 else "OVER"
    print(f"page median {verdict} 1 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
