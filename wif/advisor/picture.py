"""The picture of the advice: each setting's steady epoch as stacked phases, beside the bound."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from wif.advisor.answer import PHASES, Bound
from wif.advisor.runner import Measured
from wif.measure import names


def picture(runs: Sequence[Measured], bound: Bound, path: Path) -> Optional[Path]:
    """Each setting's steady epoch as stacked phases, beside the bound: a PNG at `path`; None: no run finished."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: List[str] = []
    ok = [m for m in runs if m.ok]
    phases = [(key, label) for key, label in PHASES if any(not math.isnan(m.mean(key)) for m in ok)]  # CUDA's alone
    parts: Dict[str, List[float]] = {label: [] for _, label in phases}
    parts["other"] = []
    for m in ok:
        bars.append(f"{m.name} ({m.role})")
        total, shown = m.mean(names.EPOCH_TIME_S), 0.0
        for key, label in phases:
            v = m.mean(key)
            v = 0.0 if math.isnan(v) else v
            parts[label].append(v)
            shown += v
        parts["other"].append(max(total - shown, 0.0))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 0.5 * len(bars) + 1.5))
    left = [0.0] * len(bars)
    for label, values in parts.items():
        ax.barh(bars, values, left=left, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.axvline(bound.epoch_s, color="black", linestyle="--", label=f"bound ({bound.source})")
    ax.set_xlabel("seconds per epoch (steady epochs' mean)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars, never over them
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
