"""Fill the prompt templates: what each role sees, as chat messages.

The planner sees the profile counters in a shuffled (seeded) order: language models favour
whatever is listed first, and a fixed order would steer every plan at the same counter.
"""

from __future__ import annotations

import random
import re
from functools import cache
from importlib import resources

from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.comparing import (
    comparison_text,
    latency_text,
    level_text,
    reference_speedup_text,
    shown_counters,
    speedup_text,
)
from accelopt_mcp.llm import ChatMessage
from accelopt_mcp.models import Evaluation, Solution, Task
from accelopt_mcp.store.base import ExperienceRecord

FAMILIES = ("cpu", "nki", "gpu")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def family_for(backend: str) -> str:
    """The prompt set a backend declares (BackendInfo.prompt_family)."""
    return backend_info(backend).prompt_family


@cache
def _template(family: str, name: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown prompt family {family!r}; known: {', '.join(FAMILIES)}")
    return (
        resources.files("accelopt_mcp.engine.prompt_templates")
        .joinpath(family, f"{name}.md")
        .read_text()
    )


def _fill(template: str, values: dict[str, str]) -> str:
    # One pass, so text that itself contains "{{...}}" (kernel code) is never re-expanded.
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"prompt placeholder {{{{{key}}}}} has no value")
        return values[key]

    return _PLACEHOLDER.sub(replace, template)


def _fence(solution: Solution) -> str:
    return {"cuda": "cuda", "cpp": "cpp"}.get(solution.spec.language.value, "python")


def describe_task(task: Task) -> str:
    definition = task.definition
    lines = [f"Definition `{definition.name}` ({definition.op_type})."]
    if definition.description:
        lines.append(definition.description)
    axes = {**definition.const_axes, **task.workload.axes}
    lines.append("Axes: " + ", ".join(f"{name}={value}" for name, value in axes.items()))
    for kind, tensors in (("Inputs", definition.inputs), ("Outputs", definition.outputs)):
        described = [
            f"{name}: {spec.dtype.value}[{', '.join(spec.shape or [])}]"
            for name, spec in tensors.items()
        ]
        lines.append(f"{kind}: " + "; ".join(described))
    lines.append("Reference implementation:\n```python\n" + definition.reference.strip() + "\n```")
    return "\n".join(lines)


def describe_profile(evaluation: Evaluation | None, rng: random.Random) -> str:
    """Status, the median with its interval, every speedup with its interval and against what
    (the reference, the parent), then the counters. Never how the harness took the figures
    (Evaluation.measurement, or such names among old profiles' counters): they describe the
    harness, not the kernel, and a planner would chase them."""
    if evaluation is None:
        return "(not profiled)"
    lines = [f"status: {evaluation.status.value}"]
    latency = latency_text(evaluation)
    if latency is not None:
        lines.append(f"latency: {latency}")
    over_reference = reference_speedup_text(evaluation)
    if over_reference is not None:
        lines.append(f"speedup: {over_reference}")
    lines += [f"speedup: {comparison_text(c)}" for c in evaluation.comparisons]
    # The latency is shown above, with its interval.
    counters = [(k, v) for k, v in shown_counters(evaluation).items() if k != "latency_ms"]
    rng.shuffle(counters)
    lines += [f"{name}: {value:.6g}" for name, value in counters]
    if evaluation.flags:
        lines.append("flags: " + ", ".join(evaluation.flags))
    return "\n".join(lines)


def describe_memory(items: list[ExperienceRecord]) -> str:
    if not items:
        return "(none yet)"
    blocks = []
    for number, item in enumerate(items, 1):
        block = f"{number}. {item.title}\n   Strategy: {item.strategy}"
        if item.pseudocode:
            block += "\n   Change:\n" + "\n".join(
                "     " + line for line in item.pseudocode.splitlines()
            )
        blocks.append(block)
    return "\n".join(blocks)


def planner_messages(
    family: str,
    task: Task,
    kernel: Solution,
    profile: Evaluation | None,
    memory: list[ExperienceRecord],
    rng: random.Random,
) -> list[ChatMessage]:
    user = _fill(
        _template(family, "planner_user"),
        {
            "task": describe_task(task),
            "kernel": kernel.entry_source.content.rstrip(),
            "profile": describe_profile(profile, rng),
            "memory": describe_memory(memory),
            "fence": _fence(kernel),
        },
    )
    return [
        ChatMessage(role="system", content=_template(family, "planner_system")),
        ChatMessage(role="user", content=user),
    ]


def executor_messages(family: str, task: Task, kernel: Solution, plan: str) -> list[ChatMessage]:
    user = _fill(
        _template(family, "executor_user"),
        {
            "task": describe_task(task),
            "kernel": kernel.entry_source.content.rstrip(),
            "entry": kernel.entry_symbol,
            "plan": plan.strip(),
            "fence": _fence(kernel),
        },
    )
    return [
        ChatMessage(role="system", content=_template(family, "executor_system")),
        ChatMessage(role="user", content=user),
    ]


def summarizer_messages(
    family: str,
    task: Task,
    slow: Solution,
    fast: Solution,
    speedup: float,
    *,
    interval: tuple[float, float] | None = None,
    confidence: float = 0.95,
) -> list[ChatMessage]:
    """`speedup`: how many times faster `fast` is than `slow` (slow median / fast median);
    `interval`: its confidence interval at `confidence`, when the pair was timed with one."""
    low, high = interval if interval is not None else (None, None)
    figure = speedup_text(speedup, low, high, "the slow kernel")
    if interval is not None:
        figure += f" {level_text(confidence)}"
    user = _fill(
        _template(family, "summarizer_user"),
        {
            "task": describe_task(task),
            "slow": slow.entry_source.content.rstrip(),
            "fast": fast.entry_source.content.rstrip(),
            "speedup": figure,
            "fence": _fence(slow),
        },
    )
    return [
        ChatMessage(role="system", content=_template(family, "summarizer_system")),
        ChatMessage(role="user", content=user),
    ]
