"""The watch: `wif.watch(loader)` in a user's own loop, and the orders `wif-advise -- python my_train.py`
gives it through the environment, so that the user's script runs the advice's measurements unchanged.

    watch    `wif.watch`: each pass over the loader timed as an epoch and said in one line; the DataLoader
             found inside whatever wraps it, and its settings read
    orders   what a measuring run of wif-advise asks of the watch: the epochs, their cap, the bound's replayed
             batches, a loader-only pass, a probe, and the DataLoader rebuilt with a candidate's settings
    record   what the watch records beside the clock (CPU, the tree's memory, VRAM) and its MLflow run
    found    the DataLoader inside whatever the loop iterates, and the anchor one watch is kept by
    ranks    a distributed script's ranks: their figures gathered into the job's, and leaving together
    hook     no line changed: DataLoader's own epoch patched to be the watch's, for loops inside a framework
             (Lightning, the HF Trainer, accelerate); `boot/sitecustomize.py` patches it in a new process
    watch_cli  `wif-watch -- COMMAND`: the hook's figures for a script run as it is
    origin   where a DataLoader was made and which framework iterates it (standard library only)

An epoch's figures and the run's summary are wif.measure.epochs', as the study's are. Imports `wif.run` and
below (the loop's clock, the stopping rule); never the sweep, the tools or the advisor.
"""
