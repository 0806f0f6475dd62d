"""Command-line tools beside the study: `wif-tune` (the loader's worker count, searched) and
`wif-batch-size` (the largest batch inside a VRAM budget).

Import `wif.run` and below; never the sweep.
"""
