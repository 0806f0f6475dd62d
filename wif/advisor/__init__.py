"""`wif-advise` and `wif.advise(...)`: where an epoch's time goes, what loader setting should help, and a
race that proves it. Read `steps` first: its `_advise` is the pipeline, one named step a line.

    `steps`: the steps in order, within --minutes; every run ended KILLED on an interruption.
    `trials`: what the steps hand on: the context, step 1's measurement, the trials and their rates.
    `choice`: the last steps: the candidates predicted, the best raced, the answer.
    `mode`: train.py's harness or a user's script, chosen once; the harness's lines to paste.
    `script`/: the script's mode: its command probed, measured, run warm (`wif-advise -- python my.py`).
    `runner`: the measuring runs, recorded; a contended run again while there is time.
    `predict`: the prediction model: each candidate's epoch time from measured rates; pure, no torch.
    `candidates`: a candidate setting, the configurations of its runs, and the settings worth trying.
    `verify`: the race of the current setting against the best predicted, by the report's rules.
    `answer`: the sentence, the candidates' table, and why to keep the current setting.
    `limit`: what holds the epoch: the loader, the copy, interference, the launches or the compute.
    `workload`: the data the advice uses, and whether others disturbed its runs.
    `advice`: what the advice is asked and gives back, and its minutes' budget.
    `advise_cli`: the command line, and `advise_overrides`, which `wif.advise(overrides)` calls.
    `examples`: a Dataset whose items wait on storage; the tests and the examples use it too.

The advisor sits above `wif.tools` and `wif.watcher`. It imports them for wif-tune's worker search and the
watch's orders. It imports `wif.run` and below, and the report's race and decision rules; never the sweep.
"""
