"""Every option of every group composes into the settings it promises; the sweep is the study's grid."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import CONF, LOADERS, STUDY_LOADERS, compose_cfg
from wif.config import Config, ConfigError, TransferKind, validate
from wif.sweep.callback import plan_jobs

EXPECTED = {  # name: (pin_memory, non_blocking, background, num_workers, prefetch_factor, transfer kind)
    "baseline": (False, False, False, 0, None, "copy"),
    "gpu_resident": (False, False, False, 0, None, "resident"),
    "bg": (False, False, True, 0, None, "copy"),
    "bg_pin": (True, False, True, 0, None, "copy"),
    "bg_pin_nb": (True, True, True, 0, None, "copy"),
    "pin_nb_w4_pf2": (True, True, False, 4, 2, "copy"),
    "pin_nb_w4_pf8": (True, True, False, 4, 8, "copy"),
    "pin_nb_w8_pf2": (True, True, False, 8, 2, "copy"),
    "pin_nb_w8_pf8": (True, True, False, 8, 8, "copy"),
    "pin_nb": (True, True, False, 0, None, "copy"),
    "pin": (True, False, False, 0, None, "copy"),
}


def test_loader_group_is_exactly_the_study() -> None:
    assert LOADERS == sorted(STUDY_LOADERS)


@pytest.mark.parametrize("name", STUDY_LOADERS)
def test_every_loader_option_composes_and_validates(name: str) -> None:
    cfg = compose_cfg(f"loader={name}")
    conf: Config = OmegaConf.to_object(cfg)
    lo, tr = conf.loader, conf.transfer
    assert lo.name == name
    assert (
        lo.pin_memory,
        tr.non_blocking,
        lo.background,
        lo.num_workers,
        lo.prefetch_factor,
        tr.kind.value,
    ) == EXPECTED[name]
    validate(conf)


def test_transfer_can_be_overridden_on_top_of_a_loader_option() -> None:
    conf = OmegaConf.to_object(compose_cfg("loader=pin_nb", "transfer=copy"))
    assert conf.loader.pin_memory and not conf.transfer.non_blocking
    conf = OmegaConf.to_object(compose_cfg("loader=pin", "transfer.non_blocking=true"))
    assert conf.transfer.non_blocking and conf.transfer.kind is TransferKind.copy


@pytest.mark.parametrize("option,fraction", [("p10", 0.1), ("p40", 0.4), ("p70", 0.7)])
def test_data_fraction_options(option: str, fraction: float) -> None:
    assert compose_cfg(f"data_fraction={option}").data.fraction == fraction
    assert compose_cfg(f"data_fraction={option}", "data.fraction=0.25").data.fraction == 0.25


def test_defaults_are_the_study() -> None:
    cfg = compose_cfg()
    assert (cfg.data.num_train, cfg.data.num_test, cfg.data.val_split, cfg.data.image_size) == (50000, 10000, 0.2, 64)
    assert cfg.trainer.epochs == 100 and cfg.model.name.value == "googlenet" and cfg.model.init_weights
    assert cfg.model.aux_logits and cfg.loader.name == "baseline" and cfg.device.value == "auto"
    assert cfg.seed == cfg.repeat == 0 and cfg.data.seed == 0
    assert compose_cfg("repeat=3").seed == 3


def test_smoke_preset_is_small() -> None:
    cfg = compose_cfg("preset=smoke")
    assert cfg.model.name.value == "tiny" and cfg.trainer.epochs <= 5 and cfg.data.num_train <= 5000


def test_typos_and_wrong_types_fail_at_composition() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_cfg("loader.num_worker=2")
    with pytest.raises(ConfigCompositionException):
        compose_cfg("data.batch_size=many")
    with pytest.raises(ConfigCompositionException):
        compose_cfg("loader=no_such_option")


def test_a_value_of_the_wrong_type_is_refused_with_the_type_it_needs() -> None:
    """Hydra's own line names the override only; its cause says why, and the one line carries both."""
    from wif.config.compose import load_config

    with pytest.raises(ConfigError) as err:
        load_config(["data.fraction=abc"])
    said = str(err.value)
    assert said == "Error merging override data.fraction=abc: Value 'abc' of type 'str' could not be converted to Float"
    with pytest.raises(ConfigError, match="loader.num_worker is not a setting of loader"):
        load_config(["loader.num_worker=2"])  # the tools' refusal reads as wif-study's


BAD = [
    (("loader=bg", "loader.num_workers=2"), "deadlock"),
    (("loader.prefetch_factor=4",), "prefetch_factor"),
    (("loader.persistent_workers=true",), "persistent_workers"),
    (("data.fraction=0",), "data.fraction"),
    (("data.fraction=1.5",), "data.fraction"),
    (("data.val_split=1.0",), "data.val_split"),
    (("data.batch_size=0",), "data.batch_size"),
    (("trainer.epochs=0",), "trainer.epochs"),
    (("loader.num_workers=-1",), "num_workers"),
    (("data.fraction=0.0001", "data.num_train=1000"), "empty"),
    (("loader=gpu_resident", "loader.num_workers=2"), "transfer=resident"),
    (("measure.rss_interval_s=0",), "measure.rss_interval_s=0"),
    (("measure.pss_budget_pct=-1",), "measure.pss_budget_pct"),
    (("trainer.threads=0",), "trainer.threads=0 must be at least 1"),
    (("data.test_images=0",), "data.test_images=0 must be a positive whole number"),
    (("data.val_images=-5",), "data.val_images=-5 must be a positive whole number"),
    (("sweep.eval_images=0",), "sweep.eval_images=0 must be a positive whole number"),
]


@pytest.mark.parametrize("overrides,word", BAD)
def test_bad_combinations_are_refused_with_a_message(overrides: tuple, word: str) -> None:
    conf = OmegaConf.to_object(compose_cfg(*overrides))
    with pytest.raises(ConfigError, match=word.replace(".", r"\.")) as err:
        validate(conf)
    assert len(str(err.value)) > 40  # a sentence that says what to do, not a bare key


def _sweep(*overrides: str) -> list:
    """The jobs `train.py -m OVERRIDES` would launch, expanded by Hydra's own sweeper code."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        params = compose("config", return_hydra_config=True).hydra.sweeper.params
        return plan_jobs(params, overrides)


def test_full_grid_is_330_jobs_repeat_major() -> None:
    jobs = _sweep("loader=glob(*)", "data.fraction=0.1,0.4,0.7")
    assert len(jobs) == 11 * 3 * 10
    repeats = [int(dict(o.split("=", 1) for o in job)["repeat"]) for job in jobs]
    assert repeats == sorted(repeats)  # each repeat is one whole pass (a block) over the 33 cells
    first_block = {
        (dict(o.split("=", 1) for o in job)["loader"], dict(o.split("=", 1) for o in job)["data.fraction"])
        for job in jobs[:33]
    }
    assert len(first_block) == 33


def test_repeat_on_the_command_line_narrows_to_one_pass() -> None:
    jobs = _sweep("loader=glob(*)", "data.fraction=0.1,0.4,0.7", "repeat=0")
    assert len(jobs) == 33 and all("repeat=0" in job for job in jobs)
