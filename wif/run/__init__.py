"""One run, start to finish: the model (model), one timed epoch (loop), data, loaders, epochs and test
(training), and the forked child that trains while its supervisor samples and records it (supervise).

Imports `wif.config`, `wif.measure` and `wif.data`; knows nothing of sweeps.
"""
