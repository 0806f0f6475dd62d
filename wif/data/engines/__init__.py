"""Loader engines: what turns a loader option into an iterable of batches.

`engine=dataloader` is `wif.data.loaders`, PyTorch's DataLoader. The others are pipelines built from the same
loader option: `engine=spdl loader=pin_nb_w4_pf2` is the same setting on another engine. The knobs keep their
meaning where they can: `num_workers` as workers or threads, `prefetch_factor` as batches in flight per
worker, `pin_memory`, `in_order`. `wif.config.validate` refuses those an engine cannot take.

Modules: what every engine shares with DataLoader (common); SPDL (spdl_pipeline), torchdata.nodes
(torchdata_nodes) and NVIDIA DALI (dali_pipeline), each imported only when a run uses it.
"""

from __future__ import annotations

from typing import Optional

import torch

from wif.config import DataConfig, EngineConfig, EngineName, LoaderConfig
from wif.data.datasets import AnySplit, DecodedSplit
from wif.data.engines.common import Request
from wif.data.loaders import Batches, Reading, build_batches


def build_engine_batches(
    split: AnySplit,
    loader: LoaderConfig,
    engine: EngineConfig,
    reading: Reading,
    *,
    data: Optional[DataConfig] = None,
    device: Optional[torch.device] = None,
) -> Batches:
    """The one place where a loader option, on the configured engine, becomes an iterable of batches.

    Args:
        split: the split to read.
        loader: the loader option.
        engine: the engine that runs it.
        reading: batch size, order, pinning; its `sampler` (a rank's shard) is engine=dataloader's only.
        data: the data's augmentation and image size, for engine=dali.
        device: where engine=dali decodes.
    """
    if engine.name is EngineName.dataloader:
        return build_batches(split, loader, reading)
    req = Request(
        split=split,
        loader=loader,
        engine=engine,
        batch_size=reading.batch_size,
        train=reading.train,
        seed=reading.seed,
        pin=reading.pin,
    )
    if engine.name is EngineName.dali:
        from wif.data.engines.dali_pipeline import DaliBatches

        assert data is not None and isinstance(split, DecodedSplit)  # wif.config.validate: data=encoded or folder
        return DaliBatches(req, augment=data.augment, image_size=data.image_size, device=device)
    if engine.name is EngineName.spdl:
        from wif.data.engines.spdl_pipeline import SpdlBatches

        return SpdlBatches(req)
    from wif.data.engines.torchdata_nodes import NodesBatches

    return NodesBatches(req, "process" if engine.name is EngineName.nodes_procs else "thread")
