"""`wif-report`: the study's answer, who is faster with confidence, from the runs in MLflow.

The modules:
- the command (report_cli) and its options (options); reading the runs (runs);
- each fraction's summary (stats) from the shared rules in `wif.decide` (the model, the verdict, the race);
- the race's record as the report reads it (raced);
- what copying costs at the link's rate (copycost);
- words and tables (verdicts, tables), one testbed's section (testbed), the whole Markdown report (document);
- pictures: each question's drawing (plots), what the drawings share (chart), and the files (figures).

Reads the store only. It imports no wif package but `wif.decide`, `wif.measure.tracking` (the store's address)
and `wif.measure.names`, and never torch or the training code: it runs anywhere the store is reachable.
"""
