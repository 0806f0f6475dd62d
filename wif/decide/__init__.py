"""Deciding from few repeats: who is faster, with what confidence, and when a race may stop.

The report, the racing sweep and wif-advise share these rules, so they live below all three.

    `model`: the per-fraction model and its simultaneous comparisons (Hsu's MCB, Dunnett).
    `draws`: the simulated draws its critical values come from.
    `noise`: each setting's own noise.
    `decision`: the verdict, computed in one place: `decide(runs)`.
    `race`: the race's pure rules: after each block, drop the settings already clearly slower.

Pure functions on frames of runs. Imports `wif.measure.names` alone, and never torch.
See docs/statistics.md.
"""


def __getattr__(name: str):
    """`wif.decide.decide(runs)`, the verdict function, loaded on first use: statsmodels is imported then."""
    if name == "decide":
        from wif.decide.decision import decide

        return decide
    raise AttributeError(name)
