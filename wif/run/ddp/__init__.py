"""Data-parallel runs (trainer.nproc>1): N ranks started by PyTorch's elastic launcher inside the job's
forked run process (`launch`), each one a DDP replica training on its shard (`rank`), and the figures of the
whole job made from every rank's (`gather`)."""
