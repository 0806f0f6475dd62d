"""Data-parallel runs (trainer.nproc>1): N ranks, each a DDP replica training on its shard.

PyTorch's elastic launcher starts the ranks inside the job's forked run process (`launch`). Each rank trains
(`rank`), and the whole job's figures are made from every rank's (`gather`).
"""
