"""Measures this host's cpu peaks into the ACCELOPT_HOME the test stages share, before any of
them runs: `python -m tests.session_peaks` (scripts/test.sh).

Figures measured under load are kept but marked so, and measured again once the host is
quieter (backends/cpu_peaks.py). Left to the first test that needs them, the parallel stage
measures them on a busy host and then again, in more than one process, about 8 s of every core
each time; measured here, on a host that runs nothing else yet, they are measured once. The
tests of the measurement itself use homes of their own (tests/backends/test_cpu_peaks.py,
test_backend_hooks.py) and are untouched by this."""

from __future__ import annotations

import os
import sys

from accelopt_mcp.backends.cpu_peaks import PeakSource, default_peaks_file
from accelopt_mcp.backends.host_facts import host_hardware


def measure() -> str:
    """The session's peaks, measured unless already kept: one line saying which and how."""
    peaks = PeakSource().peaks(host_hardware())
    one = peaks.for_cores(1)
    how = one.load.describe() if one is not None else "no one-core figures"
    return f"cpu peaks in {default_peaks_file()}: {how}"


if __name__ == "__main__":
    if not os.environ.get("ACCELOPT_HOME"):
        sys.exit("ACCELOPT_HOME is not set: this measures into the tests' home, not yours")
    print(measure())
