"""`wif-report`: the study's answer, who is faster with confidence, from the runs in MLflow.

    `report_cli`: the command; `options`: its options; `runs`: reading the runs.
    `stats`: each fraction's summary, from the shared rules in `wif.decide` (the model, the verdict, the race).
    `copycost`: what copying costs at the link's rate.
    `verdicts`, `tables`: words and tables; `document`: the Markdown report.
    `testbed`: one testbed's section, and the answer of a race's own rules.
    `plots`: each question's drawing; `chart`: what the drawings share; `figures`: the files.

Reads the store only. It imports no wif package but `wif.decide`, `wif.measure.tracking` (the store's address)
and `wif.measure.names`. It never imports torch or the training code, so it runs wherever the store is
reachable.
"""
