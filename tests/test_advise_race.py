"""The advice's race stops as soon as its answer cannot change what the user should do (issue 48): the
report's race rule (`wif.decide.race.look`) settles a tie or a clear winner, and `keep_settled` settles
"keep what you have" where no candidate can be faster by more than the margin; on simulated blocks."""

from __future__ import annotations

import pandas as pd

from wif.advisor.verify import VALUE, keep_settled
from wif.decide.race import FractionState, RaceRules, look

RULES = RaceRules(min_blocks=2, max_blocks=6, margin=0.02)
CURRENT = [1.00, 1.02, 0.99, 1.01]


def _blocks(candidate):
    return pd.DataFrame(
        [
            {"loader": name, "block": b, "fraction": 0.1, VALUE: v}
            for name, times in (("current", CURRENT), ("w2", candidate))
            for b, v in enumerate(times)
        ]
    )


def test_keep_is_settled_once_no_candidate_can_be_worth_switching_to() -> None:
    runs = _blocks([1.02, 1.02, 1.01, 1.03])  # 1.5% slower: maybe tied, maybe slower, never 2% faster
    state = look(FractionState(0.1, ["current", "w2"]), runs, VALUE, RULES, 4)
    assert not state.settled and state.alive == ["current", "w2"]  # the report's rule would race on
    assert keep_settled(runs, RULES, state.alive).startswith("keep: no candidate can be faster")


def test_keep_is_not_settled_while_a_candidate_may_still_be_worth_it() -> None:
    runs = _blocks([1.03, 1.02, 1.00, 1.03])  # noisier: up to 2.3% faster is still possible
    assert keep_settled(runs, RULES, ["current", "w2"]) == ""
    assert keep_settled(runs[runs["loader"] == "current"], RULES, ["current"]) == ""  # nothing raced against it
