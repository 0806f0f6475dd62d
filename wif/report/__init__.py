"""`wif-report`: the study's answer (who is faster, with confidence) from the runs in MLflow.

Reads MLflow only; never imports the training code (no torch), so it runs anywhere the store is reachable.
"""
