"""What a performance engineer would want to know about this host's CPU before tuning a NumPy
kernel for it: the model, the vector ISA extensions, the cache sizes and the library versions.

Read once per process from /proc/cpuinfo, /sys/devices/system/cpu/cpu0/cache and NumPy itself;
every fact is optional (another OS, a container that hides /sys): what cannot be read is left
out, never guessed. `environment_libs` gives the facts as `Environment.libs` entries (strings,
so the record stays FlashInfer-Trace compatible); `LIB_KEYS` names them for the readers.
`host_hardware` names the host ('cpu/<machine>/<model>'): the key its profiles and measured
peaks are kept under.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

CPUINFO = Path("/proc/cpuinfo")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")

ISA_KEY = "isa"
"""Environment.libs key: the relevant ISA extensions, space separated (e.g. 'avx2 fma')."""
CORES_KEY = "cores_per_evaluation"
"""Environment.libs key: how many cores one evaluation was pinned to."""
BLAS_KEY = "blas"
"""Environment.libs key: the BLAS NumPy was built against, e.g. 'scipy-openblas 0.3.31'."""
CACHE_KEYS = {"L1d": "cache_l1d", "L2": "cache_l2", "L3": "cache_l3"}
"""Environment.libs keys of the cache sizes, e.g. '48 KiB'."""
LIB_KEYS = frozenset({ISA_KEY, CORES_KEY, BLAS_KEY, *CACHE_KEYS.values()})
"""Every key `environment_libs` may add besides library versions."""

# The extensions that change what vectorized NumPy (and its BLAS) can do; the rest of the
# flags line (virtualization, security mitigations, ...) is noise to a kernel author.
_RELEVANT_PREFIXES = ("avx512", "amx", "sve")
_RELEVANT = frozenset(
    {
        "sse2",
        "sse3",
        "ssse3",
        "sse4_1",
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "bmi2",
        "avx_vnni",
        "neon",
        "asimd",
        "asimdhp",
        "asimddp",
        "fphp",
        "bf16",
        "i8mm",
    }
)


def host_hardware() -> str:
    """e.g. 'cpu/x86_64/Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz'."""
    model = platform.processor() or "unknown"
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu/{platform.machine()}/{model}"


@dataclass(frozen=True)
class HostFacts:
    machine: str
    """platform.machine(), e.g. 'x86_64' or 'aarch64'."""
    model: str | None
    """The CPU model name, None when /proc/cpuinfo does not say."""
    isa: tuple[str, ...] = ()
    """The relevant ISA extensions, in the order the kernel lists them."""
    caches: dict[str, str] = field(default_factory=dict)
    """'L1d' / 'L2' / 'L3' -> size, e.g. '48 KiB'; only those found."""
    l3_shared_by: int | None = None
    """How many logical CPUs share cpu0's L3 (None: unknown)."""
    python: str = ""
    numpy: str = ""
    blas: str | None = None


def _cpuinfo_fields(text: str) -> tuple[str | None, tuple[str, ...]]:
    model: str | None = None
    flags: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if model is None and key in ("model name", "hardware", "cpu model"):
            model = value.strip() or None
        elif not flags and key in ("flags", "features"):
            flags = value.split()
    relevant = tuple(
        dict.fromkeys(f for f in flags if f in _RELEVANT or f.startswith(_RELEVANT_PREFIXES))
    )
    return model, relevant


def _size_text(raw: str) -> str:
    """'48K' -> '48 KiB', '1280K' -> '1.25 MiB'; anything unreadable as it was."""
    raw = raw.strip()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if raw[-1:].upper() in units and raw[:-1].isdigit():
        size = int(raw[:-1]) * units[raw[-1].upper()]
    elif raw.isdigit():
        size = int(raw)
    else:
        return raw
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def _cpu_count(cpu_list: str) -> int | None:
    """'0-3,8' -> 5."""
    total = 0
    try:
        for part in cpu_list.strip().split(","):
            if not part:
                continue
            low, _, high = part.partition("-")
            total += int(high or low) - int(low) + 1
    except ValueError:
        return None
    return total or None


def _caches(directory: Path) -> tuple[dict[str, str], int | None]:
    caches: dict[str, str] = {}
    shared: int | None = None
    try:
        entries = sorted(directory.glob("index*"))
    except OSError:
        return caches, shared
    for entry in entries:
        try:
            level = (entry / "level").read_text().strip()
            kind = (entry / "type").read_text().strip()
            size = (entry / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size:
            continue
        name = f"L{level}d" if level == "1" else f"L{level}"
        caches.setdefault(name, _size_text(size))
        if level == "3":
            with contextlib.suppress(OSError):
                shared = _cpu_count((entry / "shared_cpu_list").read_text())
    return caches, shared


def _blas() -> str | None:
    try:
        config = np.show_config(mode="dicts")
    except Exception:  # an old NumPy, or a build without the information
        return None
    if not isinstance(config, dict):
        return None
    blas = (config.get("Build Dependencies") or {}).get("blas") or {}
    name = blas.get("name")
    if not name:
        return None
    version = blas.get("version")
    return f"{name} {version}" if version else str(name)


def read_host_facts(cpuinfo: Path = CPUINFO, cache_dir: Path = CACHE_DIR) -> HostFacts:
    """The facts as the files say now (uncached; `host_facts` caches)."""
    try:
        model, isa = _cpuinfo_fields(cpuinfo.read_text(errors="replace"))
    except OSError:
        model, isa = None, ()
    caches, shared = _caches(cache_dir)
    return HostFacts(
        machine=platform.machine() or "unknown",
        model=model or platform.processor() or None,
        isa=isa,
        caches=caches,
        l3_shared_by=shared,
        python=platform.python_version(),
        numpy=np.__version__,
        blas=_blas(),
    )


def _usable_cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


@cache
def host_facts() -> HostFacts:
    """This host's facts, read once per process."""
    return read_host_facts()


def environment_libs(cpus: set[int] | None = None) -> dict[str, str]:
    """Entries for a cpu evaluation's `Environment.libs`: python and numpy versions, the BLAS,
    the ISA extensions, the cache sizes and the cores the evaluation was pinned to (`cpus`;
    None: every core this process may use)."""
    facts = host_facts()
    libs = {"python": facts.python, "numpy": facts.numpy}
    if facts.blas:
        libs[BLAS_KEY] = facts.blas
    if facts.isa:
        libs[ISA_KEY] = " ".join(facts.isa)
    for name, key in CACHE_KEYS.items():
        if name in facts.caches:
            libs[key] = facts.caches[name]
    if CACHE_KEYS["L3"] in libs and facts.l3_shared_by and facts.l3_shared_by > 1:
        libs[CACHE_KEYS["L3"]] += f" shared by {facts.l3_shared_by} logical CPUs"
    libs[CORES_KEY] = str(len(cpus) if cpus else _usable_cores())
    return libs


def quietest_core(window_s: float = 0.05) -> int:
    """The usable core that was idle the longest over the next `window_s` seconds (/proc/stat;
    the lowest-numbered usable core when it cannot be read). What a one-off evaluation (the CLI's
    profile and compare, the MCP tools) is pinned to, so that it runs, like a run's pooled
    evaluations, on one core with one BLAS thread."""
    usable = sorted(os.sched_getaffinity(0))

    def idle() -> dict[int, int]:
        found: dict[int, int] = {}
        try:
            with open("/proc/stat") as f:
                for line in f:
                    name, *values = line.split()
                    if name.startswith("cpu") and name[3:].isdigit() and len(values) > 4:
                        found[int(name[3:])] = int(values[3]) + int(values[4])
        except (OSError, ValueError):
            return {}
        return found

    before = idle()
    time.sleep(window_s)
    after = idle()
    if not before or not after:
        return usable[0]
    return max(usable, key=lambda c: (after.get(c, 0) - before.get(c, 0), -c))
