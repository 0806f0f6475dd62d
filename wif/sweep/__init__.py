"""Many runs, a sweep or a single one.

- `wif-study` (study) and the task Hydra calls for each job, a single run included (job). Its steps that
  touch the store are job_record's; what a job is, its identity and its cell, is identity's.
- The sweep's callback and tally (callback), and every job checked before the first starts (preflight).
- Blocks of repeats (blocks). The race: its cells, named and merged (race_cells), its record (race_log),
  and a race under a budget (race_budget).
- The price of a sweep: `wif-plan` (plan) and its sums (pricing), and a first sweep's price measured (probe).
- A time budget: its pure rules (budget), kept while the sweep runs (sweep_budget), and what its jobs
  evaluate (evaluated).
- Sweeps beyond one GPU (cluster, gpus).

The sweepers themselves are Hydra plugins under `hydra_plugins/wif_sweeper`. Imports `wif.run` and below,
and the report's pure race rules (`wif.decide.race`).
"""
