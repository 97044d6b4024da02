"""The Ray pool's settings from the environment: a malformed value is refused in one line that
names the variable, before anything connects; it is never quietly replaced by the default."""

from __future__ import annotations

import pytest

from accelopt_mcp.backends.cluster import ClusterError
from accelopt_mcp.backends.ray_pool import (
    NO_DEVICE_ENV,
    RETRIES_ENV,
    TASK_TIMEOUT_ENV,
    RayPool,
    env_number,
)
from accelopt_mcp.backends.registry import backend_info
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
