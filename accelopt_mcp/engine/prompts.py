"""Fill the prompt templates: what each role sees, as chat messages.

Templates live in prompt_templates/<family>/ (cpu, nki, gpu), with the family-neutral pieces
(the planner's and the summarizer's reply formats) in prompt_templates/common/. What each role
is shown:

- every role: the contract in its system prompt (contract.py: the harness's tolerance rule
  with the run's numbers, the inputs, what a kernel may do); a run passes its own text.
- planner: the task, the hardware block (a run's one text, Checkpoint.prompt_hardware), the
  kernel, its profile (describe_profile), the plans already tried on its lineage with the
  head-to-head verdicts of its ties (history.lineage_history), the plans given to the other
  beam kernels this iteration, and the memory (each lesson with what it was measured on,
  where recorded); asked for one plan ("independent" mode) or for N distinct plans in one
  reply ("distinct"). Its system prompt says the executor sees the plan alone.
- executor: the task, the hardware block, the kernel with its profile, and the plan; after a
  failed attempt (repair_messages) also its own kernel, the failure class and the log's end.
- summarizer: the pair, the plan behind the change, both profiles, the measurement noise and the
  conditions the pair was measured under (cores, BLAS threads, host load), and the memory as it
  stands, numbered, so that it can refine an item or say the lesson is known (summarizer.py).

The profile block keeps the figures a decision rests on in a fixed order and shuffles only the
backend's other counters (seeded): language models favour whatever is listed first, and a
fixed order of many like counters would steer every plan at the same one.

Over ~600 lines for one reason: the roles are shown the same things in the same words (one
set of describers, for the task, the profile, the memory and the noise, over one template
loader), and each role's builder is short; apart, what the planner reads of a profile and
what the summarizer reads of it would drift.
"""

from __future__ import annotations

import math
import random
import re
from functools import cache
from importlib import resources

from accelopt_mcp.backends import host_facts as hf
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.comparing import (
    ACCURACY_FIGURES,
    ROOFLINE_FIGURES,
    breakdown_lines,
    comparison_text,
    ideal_time_ms,
    interval_text,
    latency_text,
    level_text,
    ms_text,
    reference_speedup_text,
    roofline_text,
    shown_counters,
    speedup_text,
)
from accelopt_mcp.engine.contract import contract_lines
from accelopt_mcp.engine.hardware_block import describe_hardware, uses_torch
from accelopt_mcp.engine.history import tidy_log
from accelopt_mcp.engine.summarizer import PSEUDOCODE_CHARS, STRATEGY_CHARS, TITLE_CHARS
from accelopt_mcp.engine.untrusted import Fence
from accelopt_mcp.llm import ChatMessage
from accelopt_mcp.models import Evaluation, MeasuringConditions, Solution, Task
from accelopt_mcp.store.base import ExperienceRecord

FAMILIES = ("cpu", "nki", "gpu")
COMMON = "common"
"""The directory of family-neutral template pieces."""
REPAIR_LOG_CHARS = 3_000
"""How much of a failed attempt's log (its end) the repair prompt shows."""
REPAIRABLE_STATUSES = frozenset(
    {"COMPILE_ERROR", "RUNTIME_ERROR", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE"}
)
"""Failure classes an executor can be asked to repair: its kernel ran into an error it can
read. (A TIMEOUT or NO_CODE reply may be repaired too; repair_messages words any status.)"""
NO_HISTORY_GIVEN = "(not available for this call)"
NO_ROUND_PLANS = "(none yet)"
ROUND_PLAN_CHARS = 600
"""How much of each plan given to another beam kernel the planner is shown."""
SUMMARIZER_MEMORY_ITEMS = 16
"""The most memory items a summarizer is shown (the newest), to refine one or see it is known."""
_STRATEGY_WHAT = {
    "cpu": "why the fast version is faster",
    "nki": "the mechanism behind the speedup (memory traffic, engine use, tiling, ...)",
    "gpu": "the mechanism behind the speedup",
}
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def family_for(backend: str) -> str:
    """The prompt set a backend declares (BackendInfo.prompt_family)."""
    return backend_info(backend).prompt_family


@cache
def _template(family: str, name: str) -> str:
    if family not in FAMILIES and family != COMMON:
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


def _system(family: str, name: str, fence: Fence, values: dict[str, str]) -> str:
    """A role's system prompt with the rule that fenced text is data (untrusted.Fence)."""
    return _fill(_template(family, name), values).rstrip() + "\n\n" + fence.rule() + "\n"


def default_contract(family: str, task: Task | None, profile: Evaluation | None) -> str:
    """The contract (engine/contract.py) with the default benchmark settings and the cores the
    profile's environment records: for a prompt built outside a run (a run passes its own,
    with its settings and its pool's cores)."""
    libs = profile.environment.libs if profile is not None else {}
    cores = libs.get(hf.CORES_KEY, "")
    return "\n".join(
        contract_lines(
            family,
            None,
            cores=int(cores) if cores.isdigit() else None,
            uses_torch=uses_torch(task),
        )
    )


def _contract(family: str, task: Task, contract: str | None, profile: Evaluation | None) -> str:
    return contract.strip() if contract is not None else default_contract(family, task, profile)


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


BREAKDOWN_ENTRIES = 8
"""How many parts of a call's time breakdown a profile block lists (the largest)."""


def describe_profile(
    evaluation: Evaluation | None,
    rng: random.Random,
    *,
    fence: Fence | None = None,
    breakdown: int = BREAKDOWN_ENTRIES,
) -> str:
    """What a decision needs, in a fixed order: the status; the median with its interval; the
    reference's latency in ms and the speedup over it; every other speedup (the parent) with
    its interval; the percent of the roofline with the ideal time in ms; where one call's time
    goes (the largest `breakdown` parts of Evaluation.breakdown, fenced: its names quote the
    kernel's lines); how far the outputs were from the reference's; then the backend's other
    counters (nki: neuron-profile's), in an order drawn from `rng`, to three significant
    digits. Never how the harness took the figures (Evaluation.measurement, or such names among
    old profiles' counters): they describe the harness, not the kernel, and a planner would
    chase them. Only the leftover counters are shuffled: the decision figures keep their
    place, while a fixed order of many like counters would steer every plan at the first."""
    if evaluation is None:
        return "(not profiled)"
    lines = [f"status: {evaluation.status.value}"]
    latency = latency_text(evaluation)
    if latency is not None:
        lines.append(f"latency: {latency}")
    perf = evaluation.performance
    over_reference = reference_speedup_text(evaluation)
    if perf is not None and perf.reference_latency_ms > 0:
        reference = f"reference latency: {ms_text(perf.reference_latency_ms)}"
        if over_reference is not None:
            reference += f"; this kernel: {over_reference}"
        lines.append(reference)
    lines += [f"speedup: {comparison_text(c)}" for c in evaluation.comparisons]
    roofline = roofline_text(evaluation, short=True)
    if roofline is not None:
        # How much room is left: the figure that tells a plan worth making from one that is not.
        ideal = ideal_time_ms(evaluation)
        if ideal is not None:
            roofline += f"; ideal (roofline) time {ms_text(ideal)} per call"
            # The bound that does not bind, which the percent above does not say.
            counters = evaluation.hardware_counters
            memory_bound = counters.get("memory_bound", 0.0) >= 0.5
            other = counters.get("flops_pct_of_peak" if memory_bound else "bandwidth_pct_of_peak")
            if other is not None:
                side = "compute" if memory_bound else "memory"
                roofline += f" ({side} at {other:.3g}% of its peak)"
        lines.append(f"roofline: {roofline}")
    parts = breakdown_lines(evaluation, breakdown)
    if parts:
        text = "\n".join(parts)
        lines.append(
            "where one call's time goes (measured apart from the timed rounds; indicative):\n"
            + (fence.wrap(text) if fence is not None else text)
        )
    counters = dict(shown_counters(evaluation))
    accuracy = [f"{name} {counters.pop(name):.3g}" for name in ACCURACY_FIGURES if name in counters]
    if accuracy:
        lines.append("accuracy: " + ", ".join(accuracy))
    # The latency is shown above, with its interval; the roofline figures in one line.
    others = [
        (k, v) for k, v in counters.items() if k != "latency_ms" and k not in ROOFLINE_FIGURES
    ]
    rng.shuffle(others)
    lines += [f"{name}: {value:.3g}" for name, value in others]
    if evaluation.flags:
        lines.append("flags: " + ", ".join(evaluation.flags))
    return "\n".join(lines)


def describe_memory(items: list[ExperienceRecord]) -> str:
    """The lessons, numbered: title, strategy, what it was measured on (where the item
    records it: a lesson may hold only under those conditions) and the changed segment."""
    if not items:
        return "(none yet)"
    blocks = []
    for number, item in enumerate(items, 1):
        block = f"{number}. {item.title}\n   Strategy: {item.strategy}"
        if item.conditions is not None:
            block += f"\n   Measured on: {item.conditions.text()}"
        if item.pseudocode:
            block += "\n   Change:\n" + "\n".join(
                "     " + line for line in item.pseudocode.splitlines()
            )
        blocks.append(block)
    return "\n".join(blocks)


def _hardware(family: str, hardware: str | None, profile: Evaluation | None) -> str:
    """The given hardware block (a run's one text), or one from the profile's environment
    (this host's facts for the cpu family when the profile is missing)."""
    if hardware is not None:
        return hardware.strip() or "(not recorded)"
    return describe_hardware(family, profile.environment if profile else None)


def _plan_request(n_plans: int) -> tuple[str, str]:
    """(the system prompt's reply format, the user prompt's last line)."""
    if n_plans == 1:
        return (
            _template(COMMON, "plan_format_one").strip(),
            "Give one optimization plan for this kernel.",
        )
    return (
        _fill(_template(COMMON, "plan_format_many"), {"n": str(n_plans)}).strip(),
        f"Give {n_plans} distinct optimization plans for this kernel.",
    )


def planner_messages(
    family: str,
    task: Task,
    kernel: Solution,
    profile: Evaluation | None,
    memory: list[ExperienceRecord],
    rng: random.Random,
    *,
    hardware: str | None = None,
    history: str | None = None,
    n_plans: int = 1,
    contract: str | None = None,
    round_plans: list[str] | None = None,
) -> list[ChatMessage]:
    """The planner's prompt for one kernel. n_plans: 1 asks for one plan in prose (the
    "independent" mode: N such calls); more asks for that many distinct plans in one JSON
    list (the "distinct" mode; parse with planner.parse_plan_list). hardware: the hardware
    block (describe_hardware; a run passes its one text); None: built from the profile's
    environment. history: the lineage's plans and outcomes (history.lineage_history); None:
    not available. contract: the run's contract (contract.contract_lines); None: the
    default settings'. round_plans: the plans already given to the other beam kernels this
    iteration; None: not available."""
    if n_plans < 1:
        raise ValueError(f"n_plans must be at least 1, got {n_plans}")
    reply_format, ask = _plan_request(n_plans)
    fence = Fence()
    # The lineage's outcomes quote the reasons attempts failed: kernel error text.
    history_text = history.strip() if history is not None else ""
    user = _fill(
        _template(family, "planner_user"),
        {
            "task": describe_task(task),
            "hardware": _hardware(family, hardware, profile),
            "kernel": fence.wrap(kernel.entry_source.content.rstrip(), _fence(kernel)),
            "profile": describe_profile(profile, rng, fence=fence),
            "history": fence.wrap(history_text) if history_text else NO_HISTORY_GIVEN,
            "round": describe_round_plans(round_plans),
            "memory": describe_memory(memory),
            "ask": ask,
        },
    )
    system = _system(
        family,
        "planner_system",
        fence,
        {"reply_format": reply_format, "contract": _contract(family, task, contract, profile)},
    )
    return [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content=user),
    ]


def describe_round_plans(plans: list[str] | None) -> str:
    """The plans given to the other beam kernels this iteration, numbered, each on one line
    and cut to ROUND_PLAN_CHARS."""
    if plans is None:
        return NO_HISTORY_GIVEN
    if not plans:
        return NO_ROUND_PLANS
    lines = []
    for number, plan in enumerate(plans, 1):
        flat = " ".join(plan.split())
        if len(flat) > ROUND_PLAN_CHARS:
            flat = flat[: ROUND_PLAN_CHARS - 3] + "..."
        lines.append(f"{number}. {flat}")
    return "\n".join(lines)


def more_plans_message(plans: list[str], missing: int) -> ChatMessage:
    """The follow-up turn of the "distinct" mode: the plans made so far, and a request for
    `missing` more that differ from them."""
    listed = "\n".join(
        f"{number}. {' '.join(plan.split())}" for number, plan in enumerate(plans, 1)
    )
    content = _fill(
        _template(COMMON, "planner_more"),
        {"have": str(len(plans)), "missing": str(missing), "plans": listed or "(none)"},
    )
    return ChatMessage(role="user", content=content.strip())


def executor_messages(
    family: str,
    task: Task,
    kernel: Solution,
    plan: str,
    *,
    hardware: str | None = None,
    profile: Evaluation | None = None,
    contract: str | None = None,
) -> list[ChatMessage]:
    """The executor's prompt: implement `plan` on `kernel`. profile: the kernel's own stored
    evaluation (counters in a fixed order: the executor is not steered by their order);
    hardware, contract: as for planner_messages. The executor sees the plan alone of what
    the planner saw (no lessons, no history): the planner's prompt says so."""
    fence = Fence()
    return _executor_chat(
        family,
        "executor_user",
        fence,
        task,
        kernel,
        plan,
        hardware,
        profile,
        contract,
        {"profile": describe_profile(profile, random.Random(0), fence=fence)},
    )


def _executor_chat(
    family: str,
    name: str,
    fence: Fence,
    task: Task,
    kernel: Solution,
    plan: str,
    hardware: str | None,
    profile: Evaluation | None,
    contract: str | None,
    values: dict[str, str],
) -> list[ChatMessage]:
    """The executor's system prompt, and its user prompt `name` filled with what every
    executor prompt shows (the task, the hardware block, the kernel the plan applies to, its
    entry point and the plan) and `values`."""
    user = _fill(
        _template(family, name),
        {
            "task": describe_task(task),
            "hardware": _hardware(family, hardware, profile),
            "kernel": fence.wrap(kernel.entry_source.content.rstrip(), _fence(kernel)),
            "entry": kernel.entry_symbol,
            "plan": plan.strip(),
            **values,
        },
    )
    return [
        ChatMessage(
            role="system",
            content=_system(
                family,
                "executor_system",
                fence,
                {"contract": _contract(family, task, contract, profile)},
            ),
        ),
        ChatMessage(role="user", content=user),
    ]


_FAILURE_MEANINGS = {
    "COMPILE_ERROR": "The kernel did not load: a syntax error, a failed import, a compiler "
    "error, or an exception raised while its module was imported.",
    "RUNTIME_ERROR": "The kernel loaded, but raised an exception (or crashed, or ran out of "
    "memory) when it was called.",
    "INCORRECT_NUMERICAL": "The kernel ran, but its outputs differ from the reference's by more "
    "than the tolerance.",
    "INCORRECT_SHAPE": "The kernel ran, but an output has the wrong shape, or it returned the "
    "wrong number of outputs.",
    "INCORRECT_DTYPE": "The kernel ran, but an output has the wrong dtype.",
    "TIMEOUT": "The kernel did not finish within the time limit (an endless loop, or far too "
    "slow).",
    "NO_CODE": "Your reply held no usable code block.",
}


def failure_meaning(status: str) -> str:
    """What a failure class means, in a sentence for the executor."""
    return _FAILURE_MEANINGS.get(status, f"The attempt ended with status {status}.")


def repair_messages(
    family: str,
    task: Task,
    parent_kernel: Solution,
    plan: str,
    failed_source: str,
    status: str,
    error_text: str,
    *,
    hardware: str | None = None,
    profile: Evaluation | None = None,
    contract: str | None = None,
) -> list[ChatMessage]:
    """The executor asked to repair its failed attempt: the kernel the plan was applied to,
    the plan, its own failed kernel, the failure class (see REPAIRABLE_STATUSES) and the end
    of the (already redacted) error log, evaluator paths taken out. profile: the parent's,
    for the hardware block when none is given."""
    log = tidy_log(error_text).strip()
    if len(log) > REPAIR_LOG_CHARS:
        log = "[...]\n" + log[-REPAIR_LOG_CHARS:]
    fence = Fence()
    return _executor_chat(
        family,
        "executor_repair",
        fence,
        task,
        parent_kernel,
        plan,
        hardware,
        profile,
        contract,
        {
            "failed": fence.wrap(failed_source.rstrip() or "(empty)", _fence(parent_kernel)),
            "status": status,
            "meaning": failure_meaning(status),
            # The kernel's own stderr and exception messages.
            "log": fence.wrap(log or "(the log is empty)"),
        },
    )


def _latency_noise(name: str, profile: Evaluation | None) -> str | None:
    if profile is None or profile.performance is None:
        return None
    stats = profile.latency_stats
    line = f"- {name} kernel's median latency: {latency_text(profile)}"
    if stats is not None and stats.ci_low_ms is not None and stats.ci_high_ms is not None:
        median = profile.performance.latency_ms
        if median > 0 and math.isfinite(stats.ci_high_ms):
            half = (stats.ci_high_ms - stats.ci_low_ms) / 2 / median
            line += f", +/-{half:.1%}"
        line += f" over {stats.runs} timed runs"
        if stats.contended:
            line += " (the host was busy while it was timed: read it with care)"
    return line


CONDITIONS_ADVICE = (
    "a speedup holds under the conditions it was measured in. If the change's gain comes from "
    "using more cores or threads, or from a busy host, say so in the lesson and do not claim "
    "it for other conditions (on one core, work split across threads can be the slowest)."
)


def describe_noise(
    speedup: float,
    interval: tuple[float, float] | None,
    confidence: float,
    slow_profile: Evaluation | None,
    fast_profile: Evaluation | None,
    conditions: MeasuringConditions | None = None,
) -> str:
    """How sure the pair's figures are: the speedup with its interval, each latency with its
    own, what the measurement was taken under (cores, BLAS threads, host load) and what that
    means for the lesson."""
    low, high = interval if interval is not None else (None, None)
    figure = interval_text(speedup, low, high, "x")
    if interval is None:
        lines = [f"- Speedup of the fast kernel over the slow one: {figure} (no interval known)"]
    else:
        lines = [
            f"- Speedup of the fast kernel over the slow one: {figure} {level_text(confidence)}"
        ]
    lines += [
        line
        for line in (_latency_noise("Slow", slow_profile), _latency_noise("Fast", fast_profile))
        if line is not None
    ]
    if conditions is not None:
        lines.append(f"- Measured on {conditions.text()}: {CONDITIONS_ADVICE}")
    lines.append(
        "Effects smaller than these intervals are noise: credit the speedup only to changes "
        "that can explain one of its size."
    )
    return "\n".join(lines)


def summarizer_messages(
    family: str,
    task: Task,
    slow: Solution,
    fast: Solution,
    speedup: float,
    *,
    interval: tuple[float, float] | None = None,
    confidence: float = 0.95,
    plan: str | None = None,
    positive: bool = True,
    slow_profile: Evaluation | None = None,
    fast_profile: Evaluation | None = None,
    conditions: MeasuringConditions | None = None,
    memory: list[ExperienceRecord] | None = None,
    contract: str | None = None,
) -> list[ChatMessage]:
    """`speedup`: how many times faster `fast` is than `slow` (slow median / fast median);
    `interval`: its confidence interval at `confidence`, when the pair was timed with one.
    plan: the plan of the attempt that made the pair; positive: the attempt is the fast kernel
    (the plan was applied to the slow one), else it is the slow one (the plan made its parent,
    the fast kernel, slower). slow_profile/fast_profile: their stored evaluations.
    conditions: what the pair's measurement was taken under (measuring_conditions_of the
    attempt's evaluation), told to the summarizer with the noise. memory: the lessons already
    in the namespace's memory, numbered as the reply's "refines"/"already_known" count them
    (summarizer_memory: at most SUMMARIZER_MEMORY_ITEMS); None: not shown. contract: as for
    planner_messages."""
    low, high = interval if interval is not None else (None, None)
    figure = speedup_text(speedup, low, high, "the slow kernel")
    if interval is not None:
        figure += f" {level_text(confidence)}"
    if plan is None or not plan.strip():
        plan_text = "(not recorded)"
    elif positive:
        plan_text = "Applied to the slow kernel, it produced the fast one:\n" + plan.strip()
    else:
        plan_text = (
            "Applied to the fast kernel, it produced the slow one (the plan made things "
            "worse; the lesson is what to avoid):\n" + plan.strip()
        )
    rng = random.Random(0)
    fence = Fence()
    user = _fill(
        _template(family, "summarizer_user"),
        {
            "task": describe_task(task),
            "plan": plan_text,
            "slow": fence.wrap(slow.entry_source.content.rstrip(), _fence(slow)),
            # Two profiles: the largest parts of each call are enough to say where time moved.
            "slow_profile": describe_profile(slow_profile, rng, fence=fence, breakdown=4),
            "fast": fence.wrap(fast.entry_source.content.rstrip(), _fence(fast)),
            "fast_profile": describe_profile(fast_profile, rng, fence=fence, breakdown=4),
            "speedup": figure,
            "noise": describe_noise(
                speedup, interval, confidence, slow_profile, fast_profile, conditions
            ),
            "memory": NO_HISTORY_GIVEN if memory is None else describe_memory(memory),
        },
    )
    reply_format = _fill(
        _template(COMMON, "summary_format"),
        {
            "title_chars": str(TITLE_CHARS),
            "strategy_chars": str(STRATEGY_CHARS),
            "pseudocode_chars": str(PSEUDOCODE_CHARS),
            "strategy_what": _STRATEGY_WHAT[family],
        },
    ).strip()
    system = _system(
        family,
        "summarizer_system",
        fence,
        {
            "contract": _contract(family, task, contract, slow_profile or fast_profile),
            "reply_format": reply_format,
        },
    )
    return [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content=user),
    ]


def summarizer_memory(items: list[ExperienceRecord]) -> list[ExperienceRecord]:
    """What a summarizer is shown of the memory: its newest SUMMARIZER_MEMORY_ITEMS items,
    oldest first (as describe_memory numbers them)."""
    return items[-SUMMARIZER_MEMORY_ITEMS:]
