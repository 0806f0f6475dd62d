"""A user's own workload, as wif takes it.

It holds a model factory (models), a dataset factory (datasets), and a training script that asks wif which
loader settings feed it fastest (user_script).
"""
