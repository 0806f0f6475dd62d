"""Many runs: `wif-study` (study), the task Hydra calls for each job, a single run included (job), the sweep's
callback and tally (callback), every job checked before the first starts (preflight), blocks of repeats
(blocks), the race's record (race_log), the price of a sweep (plan: `wif-plan`; probe: a first sweep's price
measured), a time budget's plan (budget: pure rules) kept while the sweep runs (sweep_budget), and sweeps
beyond one GPU (cluster, gpus). The sweepers themselves are Hydra plugins under `hydra_plugins/wif_sweeper`.

Imports `wif.run` and below, and the report's pure race rules (`wif.report.race`).
"""
