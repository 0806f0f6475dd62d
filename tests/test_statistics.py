"""The report's model on simulated grids with known answers: error rates, power, outliers (pure functions).

Grids as the study makes them: 11 settings x 3 blocks, lognormal run noise of 5% and a random effect per
block (the machine in another state for each pass). The seeds are fixed, so the rates printed here are
the same on every machine; they fail if the method's error rates or power are wrong.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from wif.decide import model, noise
from wif.report import stats

K, BLOCKS, NOISE, BLOCK_SD = 11, 3, 0.05, 0.10
NAMES = ["baseline"] + [f"s{i}" for i in range(1, K)]
CONF = 0.95


@pytest.fixture(autouse=True)
def fewer_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 draws a critical value instead of 100,000: each grid has its own noise, so nothing is cached."""
    monkeypatch.setattr(model, "DRAWS", 10_000)


def grid(rng: np.random.Generator, effects: np.ndarray, spike: tuple[int, int] | None = None) -> pd.DataFrame:
    """One simulated sweep: time = effect x block effect x run noise; `spike` (setting, block) is x3."""
    block = rng.normal(0.0, BLOCK_SD, BLOCKS)
    rows = []
    for b in range(BLOCKS):
        for i, name in enumerate(NAMES):
            t = effects[i] * np.exp(block[b] + rng.normal(0.0, NOISE))
            rows.append((name, b, t * (3.0 if spike == (i, b) else 1.0)))
    return pd.DataFrame(rows, columns=["loader", "block", "t"])


def test_no_true_difference_keeps_the_error_rates() -> None:
    rng, n = np.random.default_rng(1), 400
    any_called, included = 0, np.zeros(K)
    for _ in range(n):
        f = model.fit(grid(rng, np.ones(K)), "t", "baseline")
        any_called += any(c.p_adj < 1 - CONF for c in model.dunnett(f, "baseline", CONF).values())
        best = model.mcb(f, CONF, 0.02)
        included += [best[name].possibly_fastest for name in NAMES]
    rate, kept = any_called / n, included / n
    print(
        f"\n{n} null grids: any setting called faster/slower than baseline in {rate:.3f}; each setting in the "
        f"possibly-fastest set {kept.min():.3f}-{kept.max():.3f} of the time"
    )
    assert rate <= 0.06
    assert kept.min() >= 0.94


def test_a_setting_one_and_a_half_times_slower_is_found() -> None:
    rng, n = np.random.default_rng(2), 300
    effects = np.ones(K)
    effects[3] = 1.5
    found = 0
    for _ in range(n):
        c = model.dunnett(model.fit(grid(rng, effects), "t", "baseline"), "baseline", CONF)["s3"]
        found += c.p_adj < 1 - CONF and c.speedup < 1
    print(f"\n1.5x slower: called slower in {found / n:.3f} of {n} grids")
    assert found / n >= 0.90


def test_one_disturbed_run_is_set_apart_and_the_difference_stays() -> None:
    """A baseline run x3 (the knobs study's shared-machine run) hides the 1.5x when kept; the rule finds it."""
    rng, n = np.random.default_rng(3), 200
    effects = np.ones(K)
    effects[3] = 1.5
    flagged = found_without = found_with = 0
    for _ in range(n):
        runs = grid(rng, effects, spike=(0, 0))
        out = model.outliers(runs, "t")
        flagged += 0 in out.index
        f = model.fit(runs.drop(out.index), "t", "baseline")
        c = model.dunnett(f, "baseline", CONF)["s3"]
        found_without += c.p_adj < 1 - CONF and c.speedup < 1
        found_with += model.dunnett(model.fit(runs, "t", "baseline"), "baseline", CONF)["s3"].p_adj < 1 - CONF
    print(
        f"\nbaseline run x3: flagged in {flagged / n:.3f}; 1.5x found with it kept {found_with / n:.3f}, "
        f"once the outlier rule sets it apart {found_without / n:.3f}"
    )
    assert flagged / n >= 0.95
    assert found_without / n >= 0.90


def test_ten_times_slower_is_decided_with_three_blocks_among_48_settings() -> None:
    """The knobs study's case: 48 cells, 3 blocks; a 10x slower cell must not read 'n.s.'."""
    rng = np.random.default_rng(4)
    names = ["base"] + [f"c{i}" for i in range(47)]
    effects = np.where(np.arange(48) % 6 == 5, 10.0, 1.0)
    rows = [
        (name, b, effects[i] * np.exp(rng.normal(0, 0.1) + rng.normal(0, 0.2)))
        for b in range(3)
        for i, name in enumerate(names)
    ]
    f = model.fit(pd.DataFrame(rows, columns=["loader", "block", "t"]), "t", "base")
    assert f.blocked and f.df == 47 * 2
    vs = model.dunnett(f, "base", CONF)
    slow = [n for i, n in enumerate(names) if effects[i] == 10.0]
    assert all(vs[n].p_adj < 0.05 and vs[n].speedup < 0.5 for n in slow)
    best = model.mcb(f, CONF, 0.02)
    assert not any(best[n].possibly_fastest for n in slow)
    assert all(best[n].at_least > 2 for n in slow)  # each judged by its own 20% noise, read conservatively


def test_critical_value_matches_the_multivariate_t_integral() -> None:
    """The simulated max-|t| quantile must match scipy's numerical integral of the multivariate t with the
    correlation of the contrasts against the baseline under the fitted per-setting noise."""
    rng = np.random.default_rng(5)
    f = model.fit(grid(rng, np.ones(K)), "t", "baseline")
    c = next(iter(model.dunnett(f, "baseline", CONF).values())).critical
    dim = K - 1
    contrasts = np.hstack([np.ones((dim, 1)), -np.eye(dim)])
    cov = contrasts @ f.cov @ contrasts.T
    shape = cov / np.sqrt(np.outer(cov.diagonal(), cov.diagonal()))
    mvt = sps.multivariate_t(shape=shape, df=f.df, seed=6)
    coverage = mvt.cdf(np.full(dim, c), lower_limit=np.full(dim, -c))
    assert coverage == pytest.approx(CONF, abs=0.004)


def test_without_blocks_it_agrees_with_scipy_dunnett(monkeypatch: pytest.MonkeyPatch) -> None:
    """No block tags and the settings' own noise switched off: a one-way pooled model, whose adjusted
    p-values are scipy.stats.dunnett's on the log times (scipy pools the variance)."""
    monkeypatch.setattr(model, "DRAWS", 100_000)
    monkeypatch.setattr(noise, "OWN_QUANTILE", 0.0)
    rng = np.random.default_rng(7)
    logs = {name: rng.normal(0.1 * i, 0.05, 4) for i, name in enumerate(["baseline", "a", "b", "c"])}
    runs = pd.DataFrame(
        [(n, None, np.exp(v)) for n, values in logs.items() for v in values], columns=["loader", "block", "t"]
    )
    f = model.fit(runs, "t")
    assert not f.blocked and f.df == 12
    ours = model.dunnett(f, "baseline", CONF)
    theirs = sps.dunnett(logs["a"], logs["b"], logs["c"], control=logs["baseline"], random_state=8)
    for name, p in zip("abc", theirs.pvalue):
        assert ours[name].p_adj == pytest.approx(p, abs=0.005)
    low, high = theirs.confidence_interval(CONF)
    for name, lo, hi in zip("abc", low, high):  # scipy: mean(name) - mean(baseline), so speedup = exp(-that)
        assert (ours[name].low, ours[name].high) == pytest.approx((np.exp(-hi), np.exp(-lo)), rel=0.01)


def test_blocks_cancel_a_drift_shared_by_each_pass() -> None:
    """A 10% difference under block effects of 2x: found with the block term, not without it."""
    drift = np.array([1.0, 2.0, 0.7, 1.6])
    rows = [
        (n, b, d * (0.9 if n == "fast" else 1.0) * (1 + 0.005 * ((b + i) % 3 - 1)))
        for b, d in enumerate(drift)
        for i, n in enumerate(["baseline", "fast", "other"])
    ]
    runs = pd.DataFrame(rows, columns=["loader", "block", "t"])
    blocked = model.dunnett(model.fit(runs, "t", "baseline"), "baseline", CONF)["fast"]
    unblocked = model.dunnett(model.fit(runs.assign(block=None), "t"), "baseline", CONF)["fast"]
    assert blocked.p_adj < 0.001 and blocked.speedup == pytest.approx(1 / 0.9, rel=0.01)
    assert unblocked.p_adj > 0.05


def test_ties_within_the_margin_and_a_single_fastest() -> None:
    rows = []
    for b, drift in enumerate([1.0, 1.1, 0.95, 1.05, 1.0, 0.98]):
        for name, t in (("a", 1.0), ("b", 1.002), ("slow", 1.3)):
            rows.append((name, b, t * drift * (1 + 0.001 * ((b * 7 + len(name)) % 5 - 2))))
    best = model.mcb(model.fit(pd.DataFrame(rows, columns=["loader", "block", "t"]), "t"), CONF, 0.02)
    # b is 0.2% slower (0.1% noise) and far inside the 2% margin: a practical tie, whether or not the
    # conservative per-setting noise lets it also count as possibly fastest.
    assert best["a"].possibly_fastest and best["a"].tied
    assert (best["a"].at_least, best["a"].at_most) == pytest.approx((1.0, 1.0), abs=1e-3)
    assert best["b"].tied and 1.0 <= best["b"].at_least < best["b"].at_most < 1.02
    noisy = [(n, b, t * (1.03 if (b + (n == "b")) % 2 else 0.97)) for n, b, t in rows if n != "slow"]
    loose = model.mcb(model.fit(pd.DataFrame(noisy, columns=["loader", "block", "t"]), "t"), CONF, 0.02)
    assert loose["a"].possibly_fastest and loose["b"].possibly_fastest  # 3% noise: cannot tell them apart
    assert not loose["b"].tied  # nor bound the gap within 2%
    assert not best["slow"].possibly_fastest and 1.25 < best["slow"].at_least < 1.3 < best["slow"].at_most < 1.35


def test_one_run_per_setting_decides_nothing() -> None:
    runs = pd.DataFrame([("baseline", 0, 1.0), ("a", 0, 2.0)], columns=["loader", "block", "t"])
    f = model.fit(runs, "t")
    assert f.df == 0 and np.isnan(model.dunnett(f, "baseline", CONF)["a"].p_adj)
    assert all(b.possibly_fastest for b in model.mcb(f, CONF, 0.02).values())
    assert model.outliers(runs, "t").empty


def test_mean_ci_and_pareto() -> None:
    assert np.isnan(stats.mean_ci([3.0], CONF).low)
    assert (stats.mean_ci([2.0, 2.0], CONF).low, stats.mean_ci([2.0, 2.0], CONF).high) == (2.0, 2.0)
    time, memory = [1.0, 2.0, 3.0, 2.5, float("nan")], [5.0, 3.0, 1.0, 4.0, 0.5]
    assert list(stats.pareto_mask(time, memory)) == [True, True, True, False, False]
