"""Host facts for the hardware block, read from /proc- and /sys-like files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accelopt_mcp.backends.host_facts import (
    CORES_KEY,
    ISA_KEY,
    environment_libs,
    read_host_facts,
)

FLAGS = (
    "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 hypervisor avx512f avx512bw "
    "amx_tile md_clear"
)
X86 = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example Xeon @ 2.60GHz\n"
    f"flags\t\t: {FLAGS}\nprocessor\t: 1\nmodel name\t: Example Xeon @ 2.60GHz\nflags\t\t: fpu\n"
)
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve crc32\nCPU part\t: 0xd40\n"


def _cache(root: Path, index: int, level: int, kind: str, size: str, shared: str) -> None:
    entry = root / f"index{index}"
    entry.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size),
                        ("shared_cpu_list", shared)):  # fmt: skip
        (entry / name).write_text(f"{value}\n")


def test_model_relevant_flags_and_caches(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(X86)
    caches = tmp_path / "cache"
    _cache(caches, 0, 1, "Data", "48K", "0-1")
    _cache(caches, 1, 1, "Instruction", "32K", "0-1")
    _cache(caches, 2, 2, "Unified", "1280K", "0-1")
    _cache(caches, 3, 3, "Unified", "49152K", "0-7,16-23")
    facts = read_host_facts(cpuinfo, caches)
    assert facts.model == "Example Xeon @ 2.60GHz"
    assert facts.isa == (
        "sse2", "ssse3", "fma", "sse4_1", "sse4_2", "avx", "f16c", "avx2", "avx512f", "avx512bw",
        "amx_tile",
    )  # fmt: skip
    assert facts.caches == {"L1d": "48 KiB", "L2": "1.25 MiB", "L3": "48 MiB"}
    assert facts.l3_shared_by == 16
    assert facts.numpy == np.__version__


def test_arm_features_and_missing_files(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(ARM)
    facts = read_host_facts(cpuinfo, tmp_path / "no-such-dir")
    assert facts.isa == ("asimd", "sve")
    assert facts.caches == {} and facts.l3_shared_by is None
    nothing = read_host_facts(tmp_path / "missing", tmp_path / "missing")
    assert nothing.isa == () and nothing.python


def test_environment_libs_name_the_cores_of_one_evaluation() -> None:
    libs = environment_libs({3})
    assert libs[CORES_KEY] == "1"
    assert libs["numpy"] == np.__version__ and "python" in libs
    assert all(isinstance(value, str) for value in libs.values())
    assert environment_libs({0, 1})[CORES_KEY] == "2"
    assert ISA_KEY not in libs or libs[ISA_KEY].strip()
