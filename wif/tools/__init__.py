"""Command-line tools beside the study: `wif-tune` (the loader's worker count, searched),
`wif-batch-size` (the largest batch inside a VRAM budget) and `wif-bandwidth` (the host-device copy rates);
`recorded`: one supervised trial with its own MLflow record, as wif-tune and wif-advise run them.

Import `wif.run` and below; never the sweep.
"""
