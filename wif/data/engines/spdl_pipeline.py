"""engine=spdl: an SPDL pipeline per epoch, in SPDL's own shape (its paper's and its DataLoader's).

The copy to the device is left to wif's transfer options, timed as for every engine. The pipeline:

    sample indices -> fetch (decode, augment) on `num_workers` threads -> batch -> collate
    -> pin on CUDA (one thread) -> prefetch buffer
"""

from __future__ import annotations

import logging
from typing import Iterator

from spdl.pipeline import PipelineBuilder

from wif.data.engines.common import Request, collate, in_flight, num_batches, pin, sample_order
from wif.data.loaders import Batch, dataset_of


class SpdlBatches:
    """One pipeline per epoch, stopped when the epoch's iterator ends or is dropped (trainer.max_batches)."""

    def __init__(self, req: Request) -> None:
        loader, seed = req.loader, req.seed
        self.dataset = dataset_of(req.split)
        self.sampler = sample_order(self.dataset, loader.shuffle and req.train, seed)
        self.batch_size, self.pin, self.threads = req.batch_size, req.pin, loader.num_workers
        self.order = "input" if loader.in_order else "completion"
        self.buffer = in_flight(loader, req.engine)
        logging.getLogger("spdl").setLevel(logging.WARNING)  # its per-stage statistics at every epoch's end

    def _pipeline(self):
        builder = (
            PipelineBuilder()
            .add_source(iter(self.sampler))
            .pipe(self.dataset.__getitem__, concurrency=self.threads, output_order=self.order, name="fetch")
            .aggregate(self.batch_size)
            .pipe(collate, name="collate")
        )
        if self.pin:
            builder.pipe(pin, name="pin")
        # max_failures=0: a sample that fails stops the run, as in DataLoader (SPDL's default skips it)
        return builder.add_sink(self.buffer).build(num_threads=self.threads, max_failures=0)

    def __iter__(self) -> Iterator[Batch]:
        pipeline = self._pipeline()
        with pipeline.auto_stop():
            yield from pipeline.get_iterator()

    def __len__(self) -> int:
        return num_batches(self.dataset, self.batch_size)
