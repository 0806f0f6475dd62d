"""Cells shuffled within blocks: the order function, and Hydra finding the sweeper that applies it."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper

from tests.conftest import CONF, compose_cfg
from wif.sweep.callback import block_of, shuffle_within_blocks

CELLS = [f"loader={name}" for name in ("a", "b", "c", "d", "e", "f", "g", "h")]
JOBS = [[f"repeat={r}", cell, "data.fraction=0.1"] for r in range(3) for cell in CELLS]


def test_each_block_keeps_its_cells_in_an_order_of_its_own():
    ordered = shuffle_within_blocks(JOBS)
    blocks = [ordered[i * len(CELLS) : (i + 1) * len(CELLS)] for i in range(3)]
    for r, block in enumerate(blocks):
        assert {block_of(job) for job in block} == {str(r)}  # blocks stay whole and in their order
        assert sorted(job[1] for job in block) == sorted(CELLS)  # every cell once: the block stays complete
    orders = [[job[1] for job in block] for block in blocks]
    assert len({tuple(o) for o in orders}) == 3 and CELLS not in orders  # shuffled, and differently per block
    assert shuffle_within_blocks(JOBS) == ordered  # seeded by the block: a resumed sweep replays it


def test_a_block_is_shuffled_the_same_whatever_else_the_sweep_holds():
    alone = shuffle_within_blocks([job for job in JOBS if block_of(job) == "1"])
    assert alone == [job for job in shuffle_within_blocks(JOBS) if block_of(job) == "1"]


def test_jobs_without_a_repeat_form_one_block():
    jobs = [[cell] for cell in CELLS]
    assert sorted(map(tuple, shuffle_within_blocks(jobs))) == sorted(map(tuple, jobs))
    assert block_of(["loader=a"]) == "" and block_of(["+repeat=4"]) == "4"


def test_the_study_uses_the_blocks_sweeper_and_hydra_finds_it():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.wif_sweeper.blocks_sweeper.BlocksSweeper"
    assert cfg.sweep.shuffle is True and cfg.hydra.sweeper.params.repeat == "range(0,10)"
    assert compose_cfg("sweep.shuffle=false").sweep.shuffle is False
    names = {p.__name__ for p in Plugins.instance().discover(Sweeper)}
    assert "BlocksSweeper" in names
