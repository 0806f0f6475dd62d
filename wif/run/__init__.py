"""One run, start to finish: the model (model), the user's factories checked before a run (targets), the step as
configured (step: optimizer, precision, memory format, compile), one timed epoch (loop), data, loaders, epochs
and test (training), the forked child that trains while its supervisor samples it (supervise), the process
that forks runs made ready for it (forking), the supervisor's record of what the child sends: MLflow,
progress, the stopping rule's answer, the summary (record), when a run has measured enough (stopping),
data-parallel runs (ddp/), and the host heap of a run that loads no data, kept as a data load would leave it
(heap).

Imports `wif.config`, `wif.measure` and `wif.data`; knows nothing of sweeps.
"""
