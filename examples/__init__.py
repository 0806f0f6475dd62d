"""A user's own workload: a model factory (models), a dataset factory (datasets), and a script that asks wif
for the fastest loader settings (user_script)."""
