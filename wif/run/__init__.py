"""One run, start to finish: the model (model), one timed epoch (loop), data, loaders, epochs and test
(training), the forked child that trains while its supervisor samples it (supervise), and the supervisor's
record of what the child sends: MLflow, progress, the stopping rule's answer, the summary (record).

Imports `wif.config`, `wif.measure` and `wif.data`; knows nothing of sweeps.
"""
