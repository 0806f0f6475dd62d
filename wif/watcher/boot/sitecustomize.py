"""Put on PYTHONPATH by `wif-watch` and `wif-advise` (wif.watcher.hook): the DataLoader patched in every process.

Python imports it at start-up, before the script's first line (https://docs.python.org/3/library/site.html).
It does so in every Python process the command starts, a launcher such as torchrun or accelerate included.
It imports neither torch nor wif: it waits for torch's DataLoader module to be imported, by whoever imports
it, and patches DataLoader then. A sitecustomize the environment had already is imported after it, as
Python would have.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TARGET = "torch.utils.data.dataloader"


class _AfterDataLoader(importlib.abc.MetaPathFinder):
    """Finds nothing itself: where torch's DataLoader module is found, its loading is followed by the patch."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # once: the real finder finds it
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                from wif.watcher.hook import patch

                patch(module.DataLoader)
            except Exception as err:  # noqa: BLE001 - never the script's failure
                print(f"wif.watch: cannot watch DataLoaders here ({type(err).__name__}: {err})", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterDataLoader())


def _theirs():
    """The sitecustomize this one stands in front of, if the environment has one."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_theirs()
