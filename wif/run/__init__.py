"""One run, start to finish. Imports `wif.config`, `wif.measure` and `wif.data`; knows nothing of sweeps.

- training: the run itself, data to test, reporting through `emit`; batches: its data loaded and each split's
  loaders built; model: the models; step: the step as configured (optimizer, precision, memory format,
  compile); loop: one timed epoch and one evaluation pass; heap: the host heap of a run that loads no data,
  kept as a data load would leave it.
- targets: the user's factories, checked before a run.
- supervise: the forked child that trains while its supervisor samples it; forking: the process that forks
  runs, made ready for it; record: the supervisor's record of what the child sends (MLflow, progress, the
  stopping rule's answer, the summary).
- stopping: when a run has measured enough; between: a cell's between-run noise, read from earlier runs.
- ddp/: data-parallel runs.
"""
