"""A task is code too: a task module's top level, get_inputs(), layout transforms and
roofline() run only in a jail (uid 65534, none of the host's files), never in the trusted
harness nor in the process that loads the task."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import EvaluationStatus, Task
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.kernels import solution_from_source
from accelopt_mcp.tasks.loader import load_task
from tests.bench import quick_bench

FAST = quick_bench(timeout_seconds=20, max_timing_seconds=1)

# Every hook leaves a marker on the host if it can (a file under MARKS, holding its uid), and
# raises, when told to, with its uid and whether it could read a root-only file.
TASK = textwrap.dedent(
    """
    import os
    import numpy as np

    MARKS = {marks!r}
    RAISE = {raise_in!r}

    def _hook(name):
        try:
            os.makedirs(MARKS, exist_ok=True)
            with open(os.path.join(MARKS, name), "w") as f:
                f.write(str(os.getuid()))
        except OSError:
            pass
        if name == RAISE:
            try:
                open("/etc/shadow").read()
                shadow = True
            except OSError:
                shadow = False
            raise RuntimeError(f"hook={{name}} uid={{os.getuid()}} shadow={{shadow}}")

    _hook("top_level")

    M = 8
    N = 16

    def get_inputs():
        _hook("get_inputs")
        return [np.random.randn(M, N).astype(np.float32)]

    def forward(x):
        return x * 2

    def transform_to_nki_inputs(inputs):
        _hook("to_kernel")
        return [np.ascontiguousarray(inputs[0].T)]

    def transform_nki_outputs(out, ref):
        _hook("from_kernel")
        return out.T

    def roofline():
        _hook("roofline")
        return {{"flops": 128, "bytes_moved": 1024}}
    """
)
KERNEL = "def kernel(xt):\n    return xt * 2\n"


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend()


def _task_file(folder: Path, marks: Path, raise_in: str | None = None) -> Path:
    path = folder / "hostile_numpy.py"
    path.write_text(TASK.format(marks=str(marks), raise_in=raise_in))
    return path


def _assert_no_marks(marks: Path) -> None:
    left = sorted(p.name for p in marks.iterdir()) if marks.exists() else []
    assert left == [], f"the task's code ran outside the jail: {left}"


def test_loading_and_evaluating_a_task_runs_none_of_it_on_the_host(
    backend: CpuBackend, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    task = load_task(_task_file(tmp_path, marks))
    _assert_no_marks(marks)  # top level, get_inputs, roofline: all in the describe jail
    assert any(tag.startswith("roofline:") for tag in task.definition.tags)
    assert "nkibench:layout_transforms" in task.definition.tags

    solution = solution_from_source(KERNEL, task.definition.name)
    evaluation = backend.evaluate(task, solution, FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    _assert_no_marks(marks)  # ...and inputs and both transforms in the evaluation's


def _hostile(tmp_path: Path, hook: str) -> tuple[Task, Path]:
    """A benign task loaded, then its reference swapped for one that raises in `hook`."""
    marks = tmp_path / "marks"
    task = load_task(_task_file(tmp_path, marks))
    raising = _task_file(tmp_path, marks, raise_in=hook).read_text()
    definition = task.definition.model_copy(update={"reference": raising})
    return task.model_copy(update={"definition": definition}), marks


@pytest.mark.parametrize("hook", ["top_level", "get_inputs", "roofline"])
def test_loading_runs_the_task_as_nobody(tmp_path: Path, hook: str) -> None:
    marks = tmp_path / "marks"
    with pytest.raises(TaskFileError) as caught:
        load_task(_task_file(tmp_path, marks, raise_in=hook))
    assert f"hook={hook} uid=65534 shadow=False" in str(caught.value)
    assert "unexpected failure" not in str(caught.value)
    _assert_no_marks(marks)


@pytest.mark.parametrize("hook", ["top_level", "get_inputs", "to_kernel", "from_kernel"])
def test_evaluating_runs_the_task_as_nobody(backend: CpuBackend, tmp_path: Path, hook: str) -> None:
    task, marks = _hostile(tmp_path, hook)
    solution = solution_from_source(KERNEL, task.definition.name)
    evaluation = backend.evaluate(task, solution, FAST)
    # The task's fault, told as such; a transform that refuses the kernel's outputs is the
    # kernel's verdict, as it was when the harness ran the transform itself.
    expected = "INCORRECT_SHAPE" if hook == "from_kernel" else "RUNTIME_ERROR"
    assert evaluation.status == EvaluationStatus(expected), evaluation.log
    assert f"hook={hook} uid=65534 shadow=False" in evaluation.log
    assert "unexpected failure" not in evaluation.log
    _assert_no_marks(marks)
    assert os.path.exists("/etc/shadow")  # what the task could not read is there


def test_a_lying_description_is_refused(tmp_path: Path) -> None:
    """The task's code shares the describe jail's interpreter: it can make the report say
    anything. A NaN roofline, a negative size or a megabyte dtype name is refused clearly."""
    lies = [
        "R._declared_roofline = lambda m: {'flops': float('nan'), 'bytes_moved': 1.0}",
        "R.describe_value = lambda v: {'shape': [-1], 'dtype': 'float32'}",
        "R.describe_value = lambda v: {'shape': [2], 'dtype': 'x' * 200000}",
    ]
    for index, lie in enumerate(lies):
        path = tmp_path / f"liar{index}_numpy.py"
        path.write_text(
            "import sys\nimport numpy as np\n"
            "R = sys.modules['accelopt_mcp.backends.cpu_task_harness']\n"
            f"{lie}\n"
            "def get_inputs():\n    return [np.ones(4, dtype=np.float32)]\n"
            "def forward(x):\n    return x\n"
            "def roofline():\n    return {'flops': 1.0, 'bytes_moved': 1.0}\n"
        )
        with pytest.raises(TaskFileError, match="describes itself wrongly"):
            load_task(path)
