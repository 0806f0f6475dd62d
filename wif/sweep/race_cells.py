"""A race's cells: named as the report names them, checked for rivals, merged where a CPU runs them the same.

Also the race's fixed parts (`Race`) and its id. Light imports only: Hydra imports the race sweeper at each start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Sequence, Tuple

from omegaconf import OmegaConf

from wif.sweep.callback import BLOCK_KEY

if TYPE_CHECKING:  # the race's statistics (pandas, scipy) wait for a race to start
    from wif.decide.race import RaceRules
    from wif.sweep.race_log import RaceLog

Overrides = Tuple[str, ...]  # a cell's overrides, without the block


class RacedCell(NamedTuple):
    """A cell as the race compares it: its setting, the report's row name, at a data fraction."""

    setting: str
    fraction: float


def fractions(names: Dict[Any, RacedCell]) -> List[float]:
    """The race's fractions, smallest first."""
    return sorted({fr for _, fr in names.values()})


def single_settings(names: Dict[Any, RacedCell]) -> List[str]:
    """A race needs rivals: a fraction with one setting has nothing to race against."""
    out = []
    for fr in fractions(names):
        settings = {s for s, f in names.values() if f == fr}
        if len(settings) < 2:
            out.append(
                f"hydra/sweeper=race at data.fraction={fr:g} has one setting ({settings.pop()}): a race needs "
                "at least two; sweep more loader options, or use the default sweeper"
            )
    return out


def same_names(names: Dict[Overrides, RacedCell]) -> List[str]:
    """Cells the race would pool as one setting though they differ beyond the loader option and fraction."""
    seen: Dict[RacedCell, Overrides] = {}
    for cell, name in names.items():
        if name in seen:
            differ = sorted(set(cell) ^ set(seen[name]))
            return [
                f"a race compares loader settings of one workload, but {' / '.join(differ)} would race as the "
                f"same setting {name[0]} at fraction {name[1]:g}. Race each of them separately "
                "(hydra/sweeper=blocks sweeps them all, and the report keeps each model in its own testbed)."
            ]
        seen[name] = cell
    return []


def what_runs_on_cpu(conf: Any) -> str:
    """The cell's config as a CPU runs it, without pinning or option names: same code, same key."""
    from wif.sweep.identity import run_identity

    job = run_identity(conf, "cpu")
    job.pop(BLOCK_KEY)
    job["loader"] = {**job["loader"], "name": "", "pin_memory": False}
    job["transfer"] = {**job["transfer"], "non_blocking": False}
    return json.dumps(job, sort_keys=True, default=str)


def cpu_only(cfg: Any) -> bool:
    """Whether every job runs on a CPU: device=cpu, or jobs run here without CUDA (not under a submitting launcher)."""
    from wif.measure.nvml import cuda_present
    from wif.sweep.cluster import SUBMITTING_LAUNCHERS

    device = OmegaConf.select(cfg, "device", default="auto")
    if getattr(device, "name", device) == "cpu":
        return True
    launcher = str(OmegaConf.select(cfg, "hydra.runtime.choices.hydra/launcher", default="basic") or "basic")
    if launcher in SUBMITTING_LAUNCHERS:
        return False
    return not cuda_present()


def twin_cells(
    cells: Sequence[Overrides], names: Dict[Overrides, RacedCell], on_cpu: Dict[Overrides, str]
) -> Dict[Overrides, Overrides]:
    """Cell -> the earlier cell of its fraction whose run would be the same on a CPU; only cells that have one."""
    first: Dict[Tuple[float, str], Overrides] = {}
    out = {}
    for cell in cells:
        twin = first.setdefault((names[cell].fraction, on_cpu[cell]), cell)
        if twin != cell:
            out[cell] = twin
    return out


def merged_settings(twin_of: Dict[Overrides, Overrides], names: Dict[Overrides, RacedCell]) -> Dict[str, List[str]]:
    """Per raced setting, the settings that race as it ({'baseline': ['pin', 'pin_nb']}), over all fractions."""
    out: Dict[str, List[str]] = {}
    for cell, twin in twin_of.items():
        merged = out.setdefault(names[twin].setting, [])
        if names[cell].setting not in merged:
            merged.append(names[cell].setting)
    return out


@dataclass(frozen=True)
class Race:
    """What stays fixed while a race runs: its cells and their names, its rules, id, order and record."""

    cells: Sequence[Overrides]  # the raced cells: merged twins left out
    names: Dict[Overrides, RacedCell]
    rules: RaceRules
    race_id: str
    shuffle: bool  # sweep.shuffle: each block in an order seeded by the block
    record: RaceLog


def race_id_of(cells: Sequence[Overrides], rules: RaceRules, twin_of: Dict[Overrides, Overrides]) -> str:
    """The race's id (tag wif.race_id): its cells and rules, and its merged cells, since merging is another race."""
    key = [sorted(cells), [rules.min_blocks, rules.max_blocks, rules.margin, rules.confidence]]
    key += [sorted(twin_of)] if twin_of else []
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
