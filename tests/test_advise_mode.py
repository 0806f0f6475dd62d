"""The advice's two modes, train.py's harness and a user's script, implement every member of `Mode` alike."""

from __future__ import annotations

import inspect

from wif.advisor.mode import Harness, Mode
from wif.advisor.script.mode import Script


def test_both_modes_carry_every_member_of_the_interface_with_its_parameters() -> None:
    """A member added to Mode, or a parameter renamed in one mode, fails here before the steps call it."""
    members = [n for n in vars(Mode) if not n.startswith("_")] + list(Mode.__annotations__)
    assert {
        "bound_label",
        "evaluates_alike",
        "introduce",
        "runner",
        "bound",
        "knobs",
        "resident",
        "lines",
        "failure",
    } <= set(members)
    script = Script(command=["python", "train.py"], probed={}, base=None)
    for mode in (Harness(), script):
        for name in members:
            assert hasattr(mode, name), f"{type(mode).__name__} lacks {name}"
            want = getattr(Mode, name, None)
            if callable(want):
                theirs = list(inspect.signature(getattr(mode, name)).parameters)
                assert theirs == list(inspect.signature(want).parameters)[1:], (type(mode).__name__, name)
    assert Harness.bound_label != Script.bound_label
    assert not Harness.evaluates_alike and not script.evaluates_alike  # a plain loop's evaluation is its own
    assert Script(command=["python", "t.py"], probed={"framework": "transformers"}, base=None).evaluates_alike
