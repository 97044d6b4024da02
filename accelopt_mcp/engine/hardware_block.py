"""The hardware block of the planner's and executor's prompts: what the kernel runs on, as the
evaluation recorded it (what a kernel may import and how many threads it gets is the
contract's: engine/contract.py). A run builds it once, from its initial kernel's evaluation,
and keeps it in its checkpoint (beam.py), so that every role and every resume shows one text.

The facts come from the stored evaluation's `Environment` (of the kernel being optimized, or
the initial kernel): the hardware string, library versions and, for cpu evaluations, the host
facts of backends/host_facts.py (ISA extensions, cache sizes, cores per evaluation). What the
environment lacks is, for the cpu family, read from this host when the evaluation ran on a CPU
of the same model (the cpu backend runs here); otherwise it is left out, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from accelopt_mcp.backends import host_facts as hf
from accelopt_mcp.backends.cpu_peaks import PeakSource
from accelopt_mcp.backends.cpu_peaks_records import CorePeaks
from accelopt_mcp.backends.roofline import HardwarePeak, peak_for
from accelopt_mcp.models import Environment, Task
from accelopt_mcp.pysource import source_imports_any

_NOT_LIBRARIES = hf.LIB_KEYS | {"python"}


def _cpu_model(hardware: str) -> str | None:
    """'cpu/x86_64/Intel Xeon ...' -> 'Intel Xeon ...'."""
    parts = hardware.split("/", 2)
    if len(parts) == 3 and parts[0] == "cpu":
        return parts[2].strip() or None
    return None


def _local_facts(environment: Environment | None) -> hf.HostFacts | None:
    """This host's facts when they describe the evaluation's CPU too."""
    facts = hf.host_facts()
    if environment is None:
        return facts
    model = _cpu_model(environment.hardware)
    return facts if model is not None and model == facts.model else None


def uses_torch(task: Task | None) -> bool:
    """Whether the task's reference imports torch (then a cpu kernel may too)."""
    return task is not None and source_imports_any(task.definition.reference, ("torch",))


def _libraries_line(
    libs: dict[str, str], *, first: Sequence[str] = (), shown: Set[str] = frozenset()
) -> list[str]:
    """The "- Libraries:" line, none when there is nothing to list: `first`, then every other
    library the environment recorded, by name, but those `first` already names (`shown`)."""
    versions = [
        *first,
        *(
            f"{name} {version}"
            for name, version in sorted(libs.items())
            if name not in _NOT_LIBRARIES and name not in shown
        ),
    ]
    return ["- Libraries: " + ", ".join(versions)] if versions else []


def _cpu_block(environment: Environment | None) -> list[str]:
    libs = dict(environment.libs) if environment is not None else {}
    local = _local_facts(environment)
    model = (_cpu_model(environment.hardware) if environment else None) or (
        local.model if local else None
    )
    machine = local.machine if local else None
    if environment is not None and environment.hardware.startswith("cpu/"):
        machine = environment.hardware.split("/")[1] or machine
    lines = []
    if model or machine:
        lines.append(f"- CPU: {model or 'unknown model'}" + (f" ({machine})" if machine else ""))
    elif environment is not None:
        lines.append(f"- Hardware: {environment.hardware}")
    cores = libs.get(hf.CORES_KEY)
    blas = libs.get(hf.BLAS_KEY) or (local.blas if local else None)
    if cores is not None and cores.isdigit():
        count = int(cores)
        lines.append(f"- Cores: {count} per evaluation (pinned); BLAS threads: {count}")
    else:
        lines.append("- Cores: its own pinned core group per evaluation (size not recorded)")
    isa = libs.get(hf.ISA_KEY) or (" ".join(local.isa) if local and local.isa else None)
    vector = vector_summary(isa.split()) if isa else None
    if vector:
        lines.append(f"- Vector units: {vector}")
    caches = {name: libs[key] for name, key in hf.CACHE_KEYS.items() if key in libs}
    if not caches and local is not None:
        caches = dict(local.caches)
        if "L3" in caches and local.l3_shared_by and local.l3_shared_by > 1:
            caches["L3"] += f" shared by {local.l3_shared_by} logical CPUs"
    if caches:
        lines.append("- Caches: " + ", ".join(f"{name} {size}" for name, size in caches.items()))
    peaks = _cpu_peaks_line(environment, cores)
    if peaks:
        lines.append(peaks)
    python = libs.get("python") or (local.python if local else None)
    numpy = libs.get("numpy") or (local.numpy if local else None)
    versions = []
    if python:
        versions.append(f"Python {python}")
    if numpy:
        versions.append(f"NumPy {numpy}" + (f" (BLAS: {blas})" if blas else ""))
    lines += _libraries_line(libs, first=versions, shown={"numpy"})
    return lines


def vector_summary(isa: list[str]) -> str | None:
    """What of an ISA extension list decides how fast NumPy's loops and the BLAS run: the
    widest vector width, FMA and the wide-vector extras that matter for float work; None when
    the list names no known vector extension. 'AVX-512 (512-bit; FMA, BF16, VNNI)'."""
    flags = {flag.lower() for flag in isa}
    if "avx512f" in flags:
        width = "AVX-512 (512-bit vectors, 16 float32 per instruction"
    elif "avx2" in flags:
        width = "AVX2 (256-bit vectors, 8 float32 per instruction"
    elif "avx" in flags:
        width = "AVX (256-bit vectors, 8 float32 per instruction"
    elif {"sve", "sve2"} & flags:
        width = "SVE (scalable vectors"
    elif {"asimd", "neon"} & flags:
        width = "NEON (128-bit vectors, 4 float32 per instruction"
    elif {"sse2", "sse4_2", "sse4_1"} & flags:
        width = "SSE (128-bit vectors, 4 float32 per instruction"
    else:
        return None
    extras = [
        name
        for flag, name in (
            ("fma", "FMA"),
            ("asimd", "FMA"),
            ("avx512_bf16", "BF16"),
            ("avx512_fp16", "FP16"),
            ("avx512_vnni", "VNNI"),
            ("amx_tile", "AMX"),
        )
        if flag in flags
    ]
    return width + "".join(f", {e}" for e in dict.fromkeys(extras)) + ")"


def _rate(value: float, unit: str) -> str:
    return f"{value / 1e9:.3g} {unit}"


def _cpu_peaks_line(environment: Environment | None, cores: str | None) -> str | None:
    """This CPU's measured peaks, for as many cores as an evaluation gets: only when they
    were measured already with that many cores working (building a prompt never measures)
    and describe its CPU model."""
    hardware = environment.hardware if environment is not None else hf.host_hardware()
    measured = PeakSource().known(hardware)
    if measured is None:
        return None
    count = int(cores) if cores is not None and cores.isdigit() else 1
    peaks: CorePeaks | None = measured.for_cores(count)
    if peaks is None:
        return None
    memory = [
        f"{_rate(p.bytes_per_s, 'GB/s')} "
        + (
            "streaming from memory"
            if p.holds_bytes is None
            else f"with the data in {p.level} (up to {_bytes(p.holds_bytes)})"
        )
        for p in peaks.bandwidth
    ] or [f"{_rate(peaks.memory_bytes_per_s, 'GB/s')} streaming from memory"]
    who = "one core" if count == 1 else f"{count} cores working at once"
    return (
        f"- Measured peaks of {who} (percent of peak in a profile is taken against these): "
        f"fp32 matmul {_rate(peaks.matmul_fp32_flops_per_s, 'GFLOP/s')}, fp64 matmul "
        f"{_rate(peaks.matmul_fp64_flops_per_s, 'GFLOP/s')} (NumPy's BLAS); elementwise fp32 "
        f"{_rate(peaks.vector_fp32_flops_per_s, 'GFLOP/s')}, fp64 "
        f"{_rate(peaks.vector_fp64_flops_per_s, 'GFLOP/s')}; memory " + ", ".join(memory)
    )


def _bytes(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} B"


def _peak_line(hardware: str, per: str) -> str | None:
    try:
        peak: HardwarePeak = peak_for(hardware)
    except ValueError:
        return None
    parts = [
        f"memory {peak.memory_bytes_per_s / (1 << 30):.0f} GiB/s",
        f"fp32 matmul {peak.matmul_fp32_flops_per_s / 1e12:.3g} TFLOP/s",
        f"bf16 matmul {peak.matmul_bf16_flops_per_s / 1e12:.3g} TFLOP/s",
    ]
    if peak.vector_flops_per_s is not None:
        parts.append(f"vector {peak.vector_flops_per_s / 1e9:.3g} GFLOP/s")
    return f"- Peak per {per} ({peak.name}): " + ", ".join(parts)


def _nki_block(environment: Environment | None) -> list[str]:
    lines = []
    hardware = environment.hardware if environment is not None else None
    if hardware is None:
        lines.append("- Device: an AWS Trainium NeuronCore (model not recorded)")
    elif "simulator" in hardware:
        lines.append(
            f"- Device: {hardware} (correctness checked in the NKI simulator; no device latency)"
        )
    else:
        lines.append(f"- Device: {hardware}, one NeuronCore per evaluation")
        peak = _peak_line(hardware, "NeuronCore")
        if peak:
            lines.append(peak)
    if hardware is not None and "trn1" in hardware.lower():
        lines.append(
            "- On-chip memory (NeuronCore-v2): SBUF 24 MiB as 128 partitions x 192 KiB, PSUM "
            "2 MiB as 128 partitions x 16 KiB"
        )
    lines.append(
        "- Tile limits: at most nl.tile_size.pmax (128) partitions per tile; matmul tiles "
        "bounded by nl.tile_size.gemm_stationary_fmax and gemm_moving_fmax, PSUM tiles by "
        "psum_fmax"
    )
    lines += _libraries_line(dict(environment.libs) if environment is not None else {})
    return lines


def _gpu_block(environment: Environment | None) -> list[str]:
    lines = []
    if environment is None:
        lines.append("- GPU: an NVIDIA GPU (model not recorded)")
    else:
        lines.append(f"- GPU: {environment.hardware}, one device per evaluation")
        peak = _peak_line(environment.hardware, "GPU")
        if peak:
            lines.append(peak)
        lines += _libraries_line(dict(environment.libs))
    lines.append("- CUDA/C++ sources are built through the solution's build spec.")
    return lines


def describe_hardware(
    family: str, environment: Environment | None, *, cores: int | None = None
) -> str:
    """The hardware block for a prompt family ('cpu', 'nki', 'gpu') from an evaluation's
    environment (None: nothing recorded; the cpu family then describes this host). `cores`:
    how many cores every evaluation of a run gets (its pool's), shown over what the one
    evaluation recorded; families whose devices are not shared out by core ignore it."""
    if family == "cpu":
        if environment is not None and cores is not None:
            libs = {**environment.libs, hf.CORES_KEY: str(cores)}
            environment = environment.model_copy(update={"libs": libs})
        lines = _cpu_block(environment)
    elif family == "nki":
        lines = _nki_block(environment)
    elif family == "gpu":
        lines = _gpu_block(environment)
    else:
        raise ValueError(f"unknown prompt family {family!r}")
    return "\n".join(lines)
