"""Many runs, a sweep or a single one.

`study` is `wif-study`; `job` is the task Hydra calls for each job, a single run included.
`job_record` holds a job's steps that touch the store; `identity` says what a job is, its identity and its cell.
`callback` plans the jobs in shuffled blocks and keeps the sweep's tally.
`preflight` checks every job before the first starts.
`race_cells` names and merges a race's cells; `race_log` keeps its record.
`plan` is `wif-plan`, and `pricing` sums its price; `probe` reads a sweep's prices from the store, or probes them.
`prices` says what a run costs; `budget` says what a time budget lets run; `sweep_budget` keeps the budget.
`cluster` and `gpus` take sweeps beyond one GPU.

The sweepers are Hydra plugins under `hydra_plugins/wif_sweeper`. This package imports `wif.run`
and below, and the report's pure race rules (`wif.decide.race`).
"""
