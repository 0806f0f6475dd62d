"""`wif-report`: the study's answer, who is faster with confidence, from the runs in MLflow.

The modules:
- the command (report_cli) and its options (options); reading the runs (runs);
- the model and its simultaneous comparisons (model, stats), the simulated draws its critical values come
  from (draws), each setting's own noise (noise), and the verdict computed in one place (decision);
- the race's pure rules that the racing sweep and the report share (race, raced);
- what copying costs at the link's rate (copycost);
- words and tables (verdicts, tables), one testbed's section (testbed), the whole Markdown report (document);
- pictures: each question's drawing (plots), what the drawings share (chart), and the files (figures).

Reads the store only. It imports no wif package but `wif.measure.tracking` (the store's address) and
`wif.measure.names`, and never torch or the training code: it runs anywhere the store is reachable.
"""


def __getattr__(name: str):
    """`wif.report.decide(runs)`, the verdict function, loaded on first use.

    Importing `wif.report.runs`, as the sweep does, must not pay for statsmodels.
    """
    if name == "decide":
        from wif.report.decision import decide

        return decide
    raise AttributeError(name)
