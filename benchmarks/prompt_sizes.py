"""How large each role's prompt is on a representative cpu task (tokens ~ chars / 4).

    python benchmarks/prompt_sizes.py [--evaluation FILE] [--task rmsnorm_M256_N1024]
        [--breakdown] [--show ROLE]

The kernel is the task's deliberately slow baseline from examples/cpu/nkibench. Its profile
is taken once with the cpu backend (quick settings) and kept in FILE (default: the one
committed beside this script, taken on a 2-core AMD EPYC host), so that two checkouts
(before and after a prompt change) render the same evaluation: run it first with one
package, then with the other, against the same FILE. Memory, history and plans are fixed
stand-ins of the size a run's third iteration shows (five lessons, four tried plans).

Keyword arguments a checkout's prompt functions do not take are left out, so the script runs
against older code too.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
from pathlib import Path
from typing import Any

from accelopt_mcp.engine import prompts
from accelopt_mcp.models import BenchmarkConfig, Evaluation
from accelopt_mcp.store.base import ExperienceRecord
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[1] / "examples/cpu/nkibench"
PLAN = (
    "The kernel loops over rows in Python and converts every row to float64 and to a list to "
    "take its maximum. Replace the loop by whole-array NumPy calls on the float32 input: "
    "x.max(axis=1, keepdims=True), subtract in place into one preallocated buffer, np.exp "
    "with out=, sum along axis 1 and divide in place. One pass per step, no float64 copies, "
    "no Python loop; the output stays float32."
)
HISTORY = "\n".join(
    f"- iteration {i}, plan {p}: {text} -> {outcome}"
    for i, p, text, outcome in (
        (1, 0, "vectorize the row loop with axis-wise max/exp/sum", "3.1x [2.9, 3.3]"),
        (1, 1, "cast once to float32 and reuse one temporary", "1.4x [1.3, 1.5]"),
        (2, 0, "fuse the subtraction into np.exp via out=", "1.05x [0.98, 1.11] (tie)"),
        (2, 1, "block rows to fit L2", "INCORRECT_NUMERICAL: outputs differ"),
    )
)


def _memory() -> list[ExperienceRecord]:
    lessons = [
        ("Vectorize row loops", "Replace a Python loop over rows with axis-wise reductions."),
        ("Stay in float32", "float64 temporaries double memory traffic; keep float32."),
        ("Reuse buffers", "Pass out= to ufuncs so no temporary is allocated per step."),
        ("Fewer passes", "Fuse elementwise steps so the array is read once per pass."),
        ("Cache blocking", "Process row blocks that fit in L2 when a pass is memory bound."),
    ]
    return [
        ExperienceRecord(
            id=f"e{n}",
            definition_name="softmax",
            title=title,
            strategy=strategy * 2,
            pseudocode="for i in rows: f(x[i])  ->  f(x, axis=1)",
        )
        for n, (title, strategy) in enumerate(lessons)
    ]


def _evaluation(path: Path, task: Any, kernel: Any) -> Evaluation:
    if path.exists():
        return Evaluation.model_validate_json(path.read_text())
    from accelopt_mcp.profiling import profile_kernel

    config = BenchmarkConfig(
        warmup_runs=1, iterations=3, min_processes=1, max_processes=2, max_timing_seconds=3.0
    )
    evaluation = profile_kernel(task, kernel, config=config, save=False).evaluation
    path.write_text(evaluation.model_dump_json())
    return evaluation


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn with the keyword arguments it takes (older checkouts take fewer)."""
    accepted = inspect.signature(fn).parameters
    return fn(*args, **{k: v for k, v in kwargs.items() if k in accepted})


def _size(messages: list[Any]) -> tuple[int, int, int]:
    system = sum(len(m.content) for m in messages if m.role == "system")
    user = sum(len(m.content) for m in messages if m.role != "system")
    return system, user, (system + user) // 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--evaluation",
        type=Path,
        default=Path(__file__).with_suffix("").parent / "prompt_sizes_eval.json",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="attach an 8-part time breakdown to the profile (what a breakdown adds)",
    )
    parser.add_argument("--task", default="rmsnorm_M256_N1024")
    parser.add_argument("--show", choices=["planner", "executor", "repair", "summarizer"])
    args = parser.parse_args()
    task = load_task(ROOT / f"reference/{args.task}_numpy_0.py")
    kernel = load_solution(ROOT / f"kernels/{args.task}_0.py", task)
    evaluation = _evaluation(args.evaluation, task, kernel)
    if args.breakdown:
        from accelopt_mcp.models import BreakdownEntry

        latency = evaluation.performance.latency_ms if evaluation.performance else 1.0
        parts = [f"L{n}: row = x[i].astype(np.float64).copy()" for n in range(8)]
        evaluation = evaluation.model_copy(
            update={
                "breakdown": [
                    BreakdownEntry(what=what, ms=latency / 2**n, share=0.5**n, calls=256)
                    for n, what in enumerate(parts, 1)
                ]
            }
        )
    memory = _memory()
    rendered = {
        "planner": _call(
            prompts.planner_messages,
            "cpu",
            task,
            kernel,
            evaluation,
            memory,
            random.Random(0),
            history=HISTORY,
            round_plans=[PLAN],
        ),
        "executor": _call(
            prompts.executor_messages,
            "cpu",
            task,
            kernel,
            PLAN,
            profile=evaluation,
        ),
        "repair": _call(
            prompts.repair_messages,
            "cpu",
            task,
            kernel,
            PLAN,
            kernel.entry_source.content,
            "INCORRECT_NUMERICAL",
            "output 0 differs: ||out - ref|| = 3.1e-3 > 2.0e-5 * ||ref|| + atol\n" * 3,
            profile=evaluation,
        ),
        "summarizer": _call(
            prompts.summarizer_messages,
            "cpu",
            task,
            kernel,
            kernel,
            3.1,
            interval=(2.9, 3.3),
            plan=PLAN,
            slow_profile=evaluation,
            fast_profile=evaluation,
            memory=memory,
        ),
    }
    if args.show:
        for message in rendered[args.show]:
            print(f"----- {message.role}\n{message.content}")
        return
    print(json.dumps({"task": args.task}))
    print(f"{'role':<11} {'system':>7} {'user':>7} {'tokens':>7}  (chars; tokens ~ chars/4)")
    for role, messages in rendered.items():
        system, user, tokens = _size(messages)
        print(f"{role:<11} {system:>7} {user:>7} {tokens:>7}")


if __name__ == "__main__":
    main()
