"""`wif-report`: the study's answer (who is faster, with confidence) from the runs in MLflow: the command
(report_cli), reading the runs (runs), the model and its simultaneous comparisons (model, stats), the
simulated draws its critical values come from (draws), each setting's own noise (noise), the verdict
computed in one place (decision), the race's pure rules that the racing sweep and the report share (race,
raced), what copying costs at the link's rate (copycost), words and tables (verdicts, tables), one
testbed's section (testbed) and the whole Markdown report (document), pictures (plots, figures).

Reads the store only: imports no wif package but `wif.measure.tracking` (the store's address), and never
torch or the training code, so it runs anywhere the store is reachable.
"""


def __getattr__(name: str):
    """`wif.report.decide(runs)`, the verdict function, loaded on first use: importing `wif.report.runs`
    (as the sweep does) must not pay for statsmodels."""
    if name == "decide":
        from wif.report.decision import decide

        return decide
    raise AttributeError(name)
