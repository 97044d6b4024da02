"""What a caller sets for the Ray pool is used or refused, never dropped: a malformed setting
from the environment is refused in one line that names the variable, and backend options for
this host's backend with a cluster named, both before anything connects."""

from __future__ import annotations

import pytest

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.cluster import ClusterError
from accelopt_mcp.backends.ray_pool import (
    NO_DEVICE_ENV,
    RETRIES_ENV,
    TASK_TIMEOUT_ENV,
    RayPool,
    env_number,
)
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.comparing import compare_kernels
from accelopt_mcp.profiling import profile_kernel
from tests.backends.test_cpu_backend import VECTORIZED, python_solution, scale_task
from tests.postgrest_standin.launcher import free_port

BAD = [
    (RETRIES_ENV, "two"),
    (RETRIES_ENV, "-1"),
    (RETRIES_ENV, "2.5"),
    (RETRIES_ENV, "nan"),
    (NO_DEVICE_ENV, "soon"),
    (NO_DEVICE_ENV, "-5"),
    (NO_DEVICE_ENV, "inf"),
    (TASK_TIMEOUT_ENV, "0"),
    (TASK_TIMEOUT_ENV, "30m"),
]


@pytest.mark.parametrize(("name", "raw"), BAD)
def test_a_malformed_setting_is_refused_before_connecting(
    name: str, raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, raw)
    # Nothing listens on the port: had the pool tried to connect, the error would say so.
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError) as caught:
        RayPool(address, backend_info("cpu"))
    message = str(caught.value)
    assert message.startswith(f"{name}={raw!r} is not"), message
    assert "\n" not in message and "unset" in message and address not in message


def test_good_values_and_blanks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRIES_ENV, " 5 ")
    assert env_number(RETRIES_ENV, 2, 0, 100, integer=True) == 5
    monkeypatch.setenv(RETRIES_ENV, "")
    assert env_number(RETRIES_ENV, 2, 0, 100, integer=True) == 2
    monkeypatch.delenv(RETRIES_ENV)
    assert env_number(RETRIES_ENV, 2, 0, 100, integer=True) == 2
    monkeypatch.setenv(NO_DEVICE_ENV, "0.5")
    assert env_number(NO_DEVICE_ENV, 60.0, 0, 86400) == 0.5


def test_with_good_settings_the_pool_goes_on_to_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRIES_ENV, "3")
    monkeypatch.setenv(TASK_TIMEOUT_ENV, "600")
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match=f"cannot reach the Ray cluster at {address}"):
        RayPool(address, backend_info("cpu"))


def test_backend_options_with_a_cluster_are_refused() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens: a connection would fail otherwise
    task, solution = scale_task(), python_solution(VECTORIZED)
    with pytest.raises(ValueError, match=r"backend options \(cpus\) apply to this host") as caught:
        profile_kernel(task, solution, backend_options={"cpus": {0}}, cluster=address)
    assert address in str(caught.value) and "cluster='local'" in str(caught.value)
    kernels = [Baseline(label=n, solution=solution) for n in ("a", "b")]
    with pytest.raises(ValueError, match="backend options"):
        compare_kernels(task, kernels, backend_options={"cpus": {0}}, cluster=address)
    # Without options the same call goes on to the cluster (and finds nothing there).
    with pytest.raises(ClusterError, match="cannot reach"):
        profile_kernel(task, solution, cluster=address)
