"""`wif-advise -- python my_train.py ARGS...`: the advice's mode for a user's own script, under `wif.watch`.

    `mode`: `Script`, the `wif.advisor.mode.Mode` of a command: checked, probed, introduced, pasted.
    `runner`: `ScriptRunner`; every measuring run is the command again, with orders to its watch.
    `command`: the command started, waited for and stopped; `Served`, one process for all the trials.
    `warm`: the command forked from a server that has imported torch and the watch already.
    `warm_preload`: what that server imports once, before it forks a script.

This package imports nothing at its top, so the warm server's preload stays light.
"""
