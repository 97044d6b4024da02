"""flashinfer-bench 0.1.2's own record classes, to check our files against the real thing.

flashinfer-bench needs torch and CUDA to import as a package, but its record models
(`flashinfer_bench.data.{definition,solution,trace}`) need only pydantic. The tests fetch its
wheel from PyPI once (`pip download --no-deps`), unpack it, and load JSON with those classes in
a child interpreter, entering the packages without their torch-importing `__init__` files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

VERSION = "0.1.2"
CACHE = Path(os.environ.get("ACCELOPT_TEST_CACHE", Path.home() / ".cache" / "accelopt-tests"))


def flashinfer_bench_site() -> Path:
    """A folder holding flashinfer_bench/ (0.1.2); FLASHINFER_BENCH_SITE overrides."""
    given = os.environ.get("FLASHINFER_BENCH_SITE")
    if given:
        return Path(given)
    site = CACHE / f"flashinfer_bench-{VERSION}"
    if (site / "flashinfer_bench" / "data" / "definition.py").is_file():
        return site
    wheels = CACHE / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
         f"flashinfer-bench=={VERSION}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob(f"flashinfer_bench-{VERSION}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


_LOADER = """
import json, sys, types
from pathlib import Path

site, root = Path(sys.argv[1]), Path(sys.argv[2])
for name, path in (("flashinfer_bench", site / "flashinfer_bench"),
                   ("flashinfer_bench.data", site / "flashinfer_bench" / "data")):
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
from flashinfer_bench.data.definition import Definition
from flashinfer_bench.data.json_utils import load_json_file, load_jsonl_file
from flashinfer_bench.data.solution import Solution
from flashinfer_bench.data.trace import Trace

# The same walk as TraceSet.from_path.
loaded = {
    "definitions": [load_json_file(Definition, p).name
                    for p in sorted((root / "definitions").rglob("*.json"))],
    "solutions": [[s.name, s.definition, s.spec.language.value, s.spec.entry_point]
                  for s in (load_json_file(Solution, p)
                            for p in sorted((root / "solutions").rglob("*.json")))],
    "workloads": [[t.definition, t.workload.uuid, t.workload.axes, t.is_workload_trace()]
                  for p in sorted((root / "workloads").rglob("*.jsonl"))
                  for t in load_jsonl_file(Trace, p)],
    "traces": [[t.definition, t.solution, t.evaluation.status.value]
               for p in sorted((root / "traces").rglob("*.jsonl"))
               for t in load_jsonl_file(Trace, p)],
}
print(json.dumps(loaded))
"""


def load_with_flashinfer_bench(site: Path, root: Path) -> dict[str, list]:
    """What flashinfer-bench's record classes read from a trace-set folder; raises with their
    validation error when a file does not load there."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADER, str(site), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"flashinfer-bench could not load {root}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)
