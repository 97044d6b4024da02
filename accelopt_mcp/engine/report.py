"""Run outputs for people: a PNG of best latency per iteration."""

from __future__ import annotations

from pathlib import Path

from accelopt_mcp.engine.checkpoint import IterationSummary


def plot_best_latency(
    history: list[IterationSummary], initial_latency_ms: float | None, path: Path, title: str
) -> Path | None:
    """Writes the plot; None when matplotlib cannot be imported."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return None
    xs = [0] + [h.iteration for h in history]
    ys = [initial_latency_ms] + [h.best_latency_ms for h in history]
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    figure, axes = plt.subplots(figsize=(6, 3.5), dpi=120)
    if points:
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration (0 = initial kernel)")
    axes.set_ylabel("best latency (ms)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
