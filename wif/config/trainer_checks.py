"""The trainer group's checks: how many epochs a run takes (a fixed count with its warm-up, or `trainer.epochs=auto`
with a sound stopping rule, wif.run.stopping) and how many ranks a data-parallel run has (`trainer.nproc`, with
what every rank needs: a DataLoader whose sampler shards the data). Kept apart from `checks`, which calls them
with the rest of `validate`, as `engine_checks`, `formats` and `decode` are.
"""

from __future__ import annotations

from wif.config.schema import Config, DataFormat, DataSource, EngineName, TrainerConfig, TransferKind, require


def validate_ranks(cfg: Config) -> None:
    """trainer.nproc>1 (wif.run.ddp): every rank needs a DataLoader it can give a DistributedSampler."""
    tr = cfg.trainer
    require(tr.nproc >= 1, f"trainer.nproc={tr.nproc} must be at least 1 (the ranks of one data-parallel run).")
    require(tr.dist_timeout_s > 0, f"trainer.dist_timeout_s={tr.dist_timeout_s} must be positive (seconds).")
    if tr.nproc == 1:
        return
    shard = (
        "a DataLoader whose sampler gives each rank its shard (engine=dataloader, a loader option that "
        "streams batches, real data)"
    )
    require(
        cfg.engine.name is EngineName.dataloader,
        f"trainer.nproc={tr.nproc} with engine={cfg.engine.name.value}: "
        f"a data-parallel run needs {shard}. Use engine=dataloader, or trainer.nproc=1.",
    )
    require(
        cfg.transfer.kind is not TransferKind.resident and cfg.data.source is not DataSource.fixed,
        f"trainer.nproc={tr.nproc} with transfer={cfg.transfer.kind.value} data={cfg.data.source.value}: a "
        f"data-parallel run needs {shard}. Use another loader option or data source, or trainer.nproc=1.",
    )
    require(
        cfg.data.format is not DataFormat.shards,
        f"trainer.nproc={tr.nproc} with data.format=shards: tar shards are dealt to ranks whole, so ranks could "
        "take unequal numbers of batches and wait on each other. Use data.format=lmdb|folder, or trainer.nproc=1.",
    )


def validate_epochs(tr: TrainerConfig) -> None:
    """trainer.epochs: a positive whole number, or auto with a sound stopping rule (wif.run.stopping)."""
    require(
        tr.auto or (isinstance(tr.epochs, int) and not isinstance(tr.epochs, bool) and tr.epochs > 0),
        f"trainer.epochs={tr.epochs} must be a positive whole number, or auto (stop once the epoch time "
        "is pinned and memory has stopped growing).",
    )
    if not tr.auto:
        require(
            0 <= tr.warmup_epochs < tr.epochs or tr.epochs == 1,
            f"trainer.warmup_epochs={tr.warmup_epochs} leaves no measured epoch out of trainer.epochs="
            f"{tr.epochs}: lower warmup_epochs or raise epochs.",
        )
        return
    require(
        0 <= tr.warmup_epochs < tr.min_epochs <= tr.max_epochs,
        f"trainer.epochs=auto needs 0 <= trainer.warmup_epochs < trainer.min_epochs <= trainer.max_epochs; "
        f"got {tr.warmup_epochs}, {tr.min_epochs}, {tr.max_epochs}.",
    )
    target = tr.auto_target
    require(
        target == "auto" or (isinstance(target, (int, float)) and not isinstance(target, bool) and target > 0),
        f"trainer.auto_target={target} must be auto (derived from the tie margin and earlier runs) or a share "
        "above 0 (e.g. 0.01: +/- 1%).",
    )
    require(0.5 <= tr.auto_confidence < 1, f"trainer.auto_confidence={tr.auto_confidence} must lie in [0.5, 1).")
    require(tr.memory_window >= 1, f"trainer.memory_window={tr.memory_window} must be at least 1 epoch.")
    require(tr.memory_tolerance >= 0, f"trainer.memory_tolerance={tr.memory_tolerance} cannot be negative.")
