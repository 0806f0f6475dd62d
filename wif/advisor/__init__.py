"""`wif-advise` and `wif.advise(...)`: where an epoch's time goes, what loader setting should help, and a
race that proves it. Read `steps` first: its `_advise` is the pipeline, one named step a line.

    steps     the steps in order, within --minutes; every run ended KILLED on an interruption
    trials    what the steps hand on: the context, step 1's measurement, the loader-only trials
    choice    the last steps: the candidates predicted, the best raced, the answer
    predict   the prediction model: each candidate's epoch time from measured rates; pure, no torch
    settings  a candidate loader setting, and the configurations of its runs
    runner    the measuring runs: the configured setting's epochs, the compute bound, loader-only trials
    verify    the race of the current setting against the best predicted candidates, by the report's rules
    answer    the sentence, the candidates' table, and why to keep the current setting
    paste     the pick's lines to paste
    picture   the picture of each epoch's split
    limit     what holds the epoch, named: the loader, the copy, interference, the launches or the compute
    candidates the settings worth trying, and the rates the prediction takes from their trials
    workload  the data the advice uses, the whole folder unless told, and whether others disturbed its runs
    advice    what the advice is asked, its options, and gives back; and its minutes' budget
    advise_cli  the command line, and `advise_overrides`, which `import wif; wif.advise(overrides)` calls
    examples  a Dataset whose items wait on storage (the must-show case; the tests use it too)
    script, script_runner   `wif-advise -- python my_train.py`: the user's command probed, then measured
    command   the user's command run with orders to its watch: started, waited for, stopped
    served    the loader-only trials, every candidate in one process of the command
    warm, warm_preload      that command forked from a server that has imported torch and the watch

Above `wif.tools` and `wif.watcher`: imports them, for wif-tune's worker search and the watch's orders. It
imports `wif.run` and below, and the report's pure race and decision rules; never the sweep.
"""
