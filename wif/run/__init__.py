"""One run, start to finish. Imports `wif.config`, `wif.measure` and `wif.data`; knows nothing of sweeps.

`training` runs one run, data to test, and reports through `emit`.
`batches` loads its data and builds each split's loaders; `model` builds the models.
`step` builds the step as configured: optimizer, precision, memory format, compile.
`loop` times one epoch and one evaluation pass.
`targets` checks the user's factories before a run.
`supervise` forks the child that trains while its supervisor samples it.
`forking` makes the forking process ready for it, and says how a forked run ends: `interrupt`, `said_error`.
`record` keeps the supervisor's record of what the child sends: MLflow, progress, the summary.
`stopping` says when a run has measured enough; `noise` says how its figure scatters.
`ddp/` holds data-parallel runs.
"""
