"""Command-line tools beside the study: `wif-tune` (the loader's worker count, searched),
`wif-batch-size` (the largest batch inside a VRAM budget) and `wif-bandwidth` (the host-device copy rates).

Import `wif.run` and below; never the sweep.
"""
