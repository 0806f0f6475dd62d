"""`wif-advise`: where an epoch's time goes, what loader setting should help, and a race that proves it.

    predict   the prediction model: each candidate's epoch time from measured rates (pure, no torch)
    measure   the measuring steps: the configured setting's epochs, the compute bound, loader-only trials
    verify    the race of the current setting against the best predicted candidates (the report's rules)
    answer    the sentence, the tables, the lines to paste and the picture
    candidates the settings worth trying, and the rates the prediction takes from their trials
    cli       the command line, and `wif.advise(overrides)` for one's own script (this package is callable)
    examples  a Dataset whose items wait on storage (the must-show case; the tests use it too)

Beside `wif.tools`: imports `wif.run` and below, and the report's pure race and decision rules.
"""

import sys
import types
from typing import Any


class _Advise(types.ModuleType):
    """`wif.advise(overrides, **options)` calls `wif.advise.cli.advise_overrides`: the package is callable, so
    the public name works whether or not the package was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from wif.advise.cli import advise_overrides

        return advise_overrides(*args, **kwargs)


sys.modules[__name__].__class__ = _Advise
