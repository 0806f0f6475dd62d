"""The watch: `wif.watch(loader)` in a user's own loop, and the orders `wif-advise -- python my_train.py` gives it.

The orders come through the environment, so the user's script runs the advice's measurements unchanged.

    `watch`: `wif.watch` and `hooked`. Each pass over the loader goes to its session, one session a loop.
    `session`: one loader's watch. It times each epoch in windows and says each window in one line.
    `claim`: which loader trains. A claim made at its first epoch is proven by a step, dropped for an evaluation.
    `windows`: how an epoch is cut into windows of batches, by the orders' count or the watch's clock.
    `options`: how a loader is watched, what the watch says of a window, and where its lines go.
    `orders`: what a measuring run of wif-advise asks of the watch. It names the windows, the bound's replay,
        a loader-only pass, a probe, or a candidate's loader settings.
    `replay`: the bound's kept batches handed out again. Each is a copy, its time left out of the window.
    `served`: loader-only trials in one process. Each candidate's end is handed on, the next orders taken.
    `proof`: whether a candidate's settings reached the DataLoader an epoch iterates; standard library only.
    `record`: what the watch records beside the clock (CPU, the tree's memory, VRAM), and its MLflow run.
    `found`: the DataLoader inside whatever the loop iterates, its settings, and the anchor a watch is kept by.
        It also rebuilds the DataLoader with a candidate's worker settings.
    `ranks`: a distributed script's ranks. Their figures are gathered into the job's, and they leave together.
    `hook`: no line changed. DataLoader's own epoch is patched to be the watch's, for loops inside a framework.
        `boot/sitecustomize.py` patches it in a new process, for `wif-watch -- COMMAND`.
    `origin`: where a DataLoader was made and which framework iterates it; standard library only.

Under orders, a window's figure is what the script's own epoch would spend on it. An epoch's figures and the
run's summary are wif.measure.epochs', as the study's are. Imports `wif.run` and below: the loop's clock, the
stopping rule. Never the sweep, the tools or the advisor.
"""
