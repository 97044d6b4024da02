"""Run outputs for people: a PNG of best latency per iteration."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelopt_mcp.engine.checkpoint import IterationSummary

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def latency_label(latency_ms: float, initial_ms: float | None) -> str:
    """The text next to one point: its latency and, after the start, its speedup over the
    initial kernel."""
    text = f"{latency_ms:.3g} ms"
    if initial_ms and latency_ms > 0:
        text += f"\n{initial_ms / latency_ms:.2f}x"
    return text


REFERENCE_LABEL = "reference"
"""How the plot's legend names the task's reference line (followed by its latency)."""


def reference_latency(
    initial_latency_ms: float | None, reference_speedup: float | None
) -> float | None:
    """The reference's latency from the initial kernel's latency and its speedup over the
    reference (timed in the same rounds: speedup = reference / kernel); None without both."""
    if not initial_latency_ms or not reference_speedup or reference_speedup <= 0:
        return None
    return initial_latency_ms * reference_speedup


def plot_best_latency(
    history: list[IterationSummary],
    initial_latency_ms: float | None,
    path: Path,
    title: str,
    reference_latency_ms: float | None = None,
) -> Path | None:
    """Writes the plot (best_latency_figure); None when matplotlib cannot be imported."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure = best_latency_figure(history, initial_latency_ms, title, reference_latency_ms)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def best_latency_figure(
    history: list[IterationSummary],
    initial_latency_ms: float | None,
    title: str,
    reference_latency_ms: float | None = None,
) -> Figure:
    """Best latency per iteration on a logarithmic y axis, so that a gain after a large first
    one stays visible; every point labelled with its latency and its speedup over the initial
    kernel; the task's reference as a dashed line (labelled in the legend) where its latency
    is known. Needs matplotlib; close the figure when done (matplotlib.pyplot.close)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    xs = [0] + [h.iteration for h in history]
    ys = [initial_latency_ms] + [h.best_latency_ms for h in history]
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0]
    figure, axes = plt.subplots(figsize=(7, 4), dpi=120)
    if points:
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        axes.set_yscale("log")
        for index, (x, y) in enumerate(points):
            label = latency_label(y, initial_latency_ms if x > 0 else None)
            axes.annotate(
                label,
                (x, y),
                textcoords="offset points",
                # Alternate above and below, so that labels of close points do not overlap.
                xytext=(0, 8 if index % 2 == 0 else -10),
                ha="center",
                va="bottom" if index % 2 == 0 else "top",
                fontsize=7,
            )
        reference = (
            reference_latency_ms if reference_latency_ms and reference_latency_ms > 0 else None
        )
        shown = [p[1] for p in points] + ([reference] if reference is not None else [])
        low = min(shown)
        high = max(shown)
        # Room for the labels above the highest and below the lowest point.
        axes.set_ylim(low / 2.0, high * 1.8)
        # Plain numbers (0.6, not 6x10^-1). The in-between ticks are labelled only where there
        # is room: every one over a narrow range, 2 and 5 of each decade over a wider one (all
        # of 2-9 crowd together at the top of a decade), none over a wide one.
        plain = FuncFormatter(lambda value, _: f"{value:g}")
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(_minor_labels(high / low))
        axes.set_xlim(min(p[0] for p in points) - 0.5, max(p[0] for p in points) + 0.5)
        if initial_latency_ms:
            axes.axhline(initial_latency_ms, color="grey", linestyle=":", linewidth=0.8)
        if reference is not None:
            # What "speedup over the reference" is against: below this line a kernel beats it.
            axes.axhline(
                reference,
                color="tab:red",
                linestyle="--",
                linewidth=1.0,
                label=f"{REFERENCE_LABEL} ({reference:.3g} ms)",
            )
            axes.legend(loc="upper right", fontsize=7)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration (0 = initial kernel)")
    axes.set_ylabel("best latency (ms, log scale)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    return figure


def _minor_labels(span: float) -> Any:
    """The minor tick labels for a y axis spanning `span` (highest / lowest point)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if span >= 20:
        return NullFormatter()

    def label(value: float, _: int) -> str:
        if span < 3 or value <= 0:
            return f"{value:g}"
        leading = round(value / 10 ** math.floor(math.log10(value)))
        return f"{value:g}" if leading in (2, 5) else ""

    return FuncFormatter(label)
