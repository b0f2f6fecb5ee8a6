"""The front as a picture: a PNG of every trial and the Pareto staircase in (ε, error), for the MLflow run.

Only released values are drawn (each trial's ε and its error on public evaluation data), so the figure is public.
The x axis is each trial's ε, which is that of **one** model: a trial that trains R replications releases the mean
error of R models, each under its own charge, so the released error costs R such charges (the ledger holds them).
matplotlib's Agg backend renders it off-screen (no display needed).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from dpaudit_plugins.dpareto.results import front_of  # noqa: E402
from dpaudit_plugins.dpareto.trials import Trial  # noqa: E402


def front_png(trials: Sequence[Trial], reference: tuple[float, float], title: str) -> bytes:
    """PNG bytes of the trials (failed ones marked at the reference error), the front and the reference point."""
    fig, ax = plt.subplots(figsize=(6.0, 4.0), dpi=100)
    try:
        ok = [t for t in trials if not t.failed]
        failed = [t for t in trials if t.failed]
        ax.scatter([t.epsilon for t in ok], [t.error for t in ok], s=12, color="0.6", label="trials")
        if failed:
            ax.scatter([t.epsilon for t in failed], [reference[1]] * len(failed), marker="x", color="tab:red",
                       label="failed (counted at the reference error)")
        front = front_of(trials)
        if front:
            xs = [t.epsilon for t in front]
            ax.step(xs + [max(reference[0], xs[-1])], [t.error for t in front] + [front[-1].error], where="post",
                    color="tab:blue", label="Pareto front")
            ax.scatter(xs, [t.error for t in front], s=18, color="tab:blue")
        ax.scatter([reference[0]], [reference[1]], marker="*", s=80, color="k", label="reference point")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon of one model (a trial's error may average several, each charged)")
        ax.set_ylabel("error (public evaluation data)")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)
