"""wif-report on runs with known figures, logged into a real SQLite MLflow store, and its statistics alone. Its
options and refusals, each on a store of its own: tests/test_report_options."""

from __future__ import annotations

import re

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps

from tests.stores import GPU, log_run, study_store
from wif.decide import model
from wif.report import plots
from wif.report.report_cli import main
from wif.report.runs import RunFilter, baseline_of, load_runs
from wif.report.verdicts import slower_by

CONFIDENCE = 0.95

# Fraction 0.1: five complete blocks with a strong drift shared by every loader in a block.
DRIFT = np.array([1.0, 1.3, 0.9, 1.2, 1.1])
BASE_01 = 10.0 * DRIFT
FAST_01 = 5.0 * DRIFT * np.array([1.01, 0.99, 1.0, 1.02, 0.98])  # 2x faster, small noise
NOISY_01 = 10.0 * DRIFT * np.array([0.8, 1.25, 0.95, 1.15, 0.85])  # overlaps baseline
NEAR_01 = 5.0 * DRIFT * np.array([1.03, 0.97, 1.04, 0.99, 1.01])  # a hair slower than FAST_01, lean in memory
# Fraction 0.4: incomplete blocks (pin_nb misses block 4, pin ran once) -> Welch.
BASE_04 = np.array([40.0, 41.0, 39.0, 40.5, 39.5])
FAST_04 = np.array([20.0, 20.4, 19.8, 20.2])
NOISY_04 = np.array([30.0, 45.0, 38.0, 50.0, 34.0])
ONE_04 = np.array([45.0])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A GPU study with a clear and an unclear case at two fractions, plus failed and running runs."""
    path = tmp_path_factory.mktemp("study")
    client, uri, exp_id = study_store(path)
    pos = iter(range(1000))
    for block in range(5):
        for name, times in (("baseline", BASE_01), ("pin_nb", FAST_01), ("bg", NOISY_01), ("pin", NEAR_01)):
            log_run(
                client,
                exp_id,
                name,
                0.1,
                block,
                times[block],
                sweep_pos=next(pos),
                ram=1000.0 if name == "pin" else 2000.0,
                vram=3000.0 if name == "pin_nb" else 1500.0,
            )
        for name, times in (("baseline", BASE_04), ("pin_nb", FAST_04), ("bg", NOISY_04), ("pin", ONE_04)):
            if block < len(times):
                log_run(client, exp_id, name, 0.4, block, times[block], sweep_pos=next(pos))
    log_run(client, exp_id, "baseline", 0.1, 5, 999.0, status="FAILED", error="CUDA out of memory")
    log_run(client, exp_id, "pin_nb", 0.1, 5, 999.0, status="RUNNING")
    out = path / "report"
    assert main(["--tracking-uri", uri, "--out", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv").set_index(["fraction", "loader"])
    return {"client": client, "uri": uri, "exp_id": exp_id, "out": out, "summary": summary}


def test_the_baseline_is_the_one_the_runs_name_else_baseline() -> None:
    """+study=transfers names its blocking copy (tracking.baseline); runs from before the key name none."""
    assert baseline_of(pd.DataFrame({"baseline": ["pin_w4_pf2"] * 3 + [None]})) == "pin_w4_pf2"
    assert baseline_of(pd.DataFrame({"baseline": [None, None]})) == "baseline"
    assert baseline_of(pd.DataFrame({"loader": ["bg"]})) == "baseline"


def test_means_and_intervals_match_scipy(study):
    s = study["summary"]
    for fraction, loader, times in ((0.1, "baseline", BASE_01), (0.4, "bg", NOISY_04)):
        low, high = sps.t.interval(CONFIDENCE, len(times) - 1, loc=times.mean(), scale=sps.sem(times))
        row = s.loc[(fraction, loader)]
        assert row["n"] == len(times)
        assert row["time_s"] == pytest.approx(times.mean())
        assert (row["time_ci_low_s"], row["time_ci_high_s"]) == pytest.approx((low, high))


def test_failed_and_running_runs_are_excluded_and_listed(study):
    s, md = study["summary"], (study["out"] / "summary.md").read_text()
    assert s.loc[(0.1, "baseline"), "n"] == 5 and s.loc[(0.1, "pin_nb"), "n"] == 5
    assert s["time_s"].max() < 999
    excluded = md.split("### Excluded")[1]
    assert "| baseline@0.1 | cuda | FAILED | CUDA out of memory |" in excluded
    assert "| pin_nb@0.1 | cuda | RUNNING | not finished |" in excluded


def _statsmodels_contrasts(times: dict[str, np.ndarray], blocks: dict[str, list[int]]) -> pd.Series:
    """log(baseline) - log(setting) from statsmodels' formula interface: an independent fit of the same model."""
    rows = [(name, b, t) for name, values in times.items() for b, t in zip(blocks[name], values)]
    frame = pd.DataFrame(rows, columns=["loader", "block", "t"])
    res = smf.ols("np.log(t) ~ C(loader, Treatment(reference='baseline')) + C(block)", frame).fit()
    return pd.Series(
        {
            name: -res.params[f"C(loader, Treatment(reference='baseline'))[T.{name}]"]
            for name in times
            if name != "baseline"
        }
    ), res


def test_complete_blocks_one_model_simultaneous_intervals(study):
    s = study["summary"].loc[0.1]
    assert set(s["blocked"]) == {True} and set(s["n_blocks"]) == {5} and set(s["residual_df"]) == {12}
    times = {"baseline": BASE_01, "pin_nb": FAST_01, "bg": NOISY_01, "pin": NEAR_01}
    contrasts, res = _statsmodels_contrasts(times, {name: list(range(5)) for name in times})
    for name, log_ratio in contrasts.items():
        assert s.loc[name, "speedup"] == pytest.approx(np.exp(log_ratio))
    # Complete blocks: the contrast is the mean within-block log ratio, as the paired figure was.
    assert s.loc["pin_nb", "speedup"] == pytest.approx(np.exp(np.log(BASE_01 / FAST_01).mean()))
    # Simultaneous: wider than the one-at-a-time t interval of the same model (each setting's own noise),
    # narrower than Bonferroni over 3; and never narrower than the pooled model's one-at-a-time interval.
    runs = pd.DataFrame(
        [(name, b, t) for name, ts in times.items() for b, t in enumerate(ts)], columns=["loader", "block", "t"]
    )
    f = model.fit(runs, "t", "baseline")
    se = f.se(f.index("baseline"), f.index("pin_nb"))
    half = np.log(s.loc["pin_nb", "speedup_ci_high"] / s.loc["pin_nb", "speedup"])
    assert sps.t.ppf(0.975, 12) * se < half < sps.t.ppf(1 - 0.025 / 3, 12) * se
    assert half > sps.t.ppf(0.975, 12) * res.bse["C(loader, Treatment(reference='baseline'))[T.pin_nb]"]
    assert bool(s.loc["pin_nb", "significant"]) and s.loc["pin_nb", "rank"] == 1
    assert not bool(s.loc["bg", "significant"])  # the unclear case
    assert list(s.loc[s["possibly_fastest"]].index) == ["pin_nb", "pin"]


def test_incomplete_blocks_stay_in_the_model_and_one_repeat_has_no_interval(study):
    s = study["summary"].loc[0.4]
    assert set(s["blocked"]) == {True}  # pin_nb misses block 4, pin ran once: unbalanced, still blocked
    times = {"baseline": BASE_04, "pin_nb": FAST_04, "bg": NOISY_04, "pin": ONE_04}
    contrasts, _ = _statsmodels_contrasts(times, {name: list(range(len(t))) for name, t in times.items()})
    for name, log_ratio in contrasts.items():
        assert s.loc[name, "speedup"] == pytest.approx(np.exp(log_ratio))
    assert bool(s.loc["pin_nb", "significant"]) and not bool(s.loc["bg", "significant"])
    one = s.loc["pin"]
    assert one["n"] == 1 and np.isnan(one["time_ci_low_s"]) and not np.isnan(one["speedup_ci_low"])
    md = (study["out"] / "summary.md").read_text()
    assert "| pin | 1 | 45 †" in md and "fewer than 2 repeats: mean shown without an interval" in md


def test_verdicts_name_the_possibly_fastest_the_cheapest_and_the_clearly_slower(study):
    md = (study["out"] / "summary.md").read_text()
    assert "{" not in md  # no unformatted placeholder left in the words (a missing f once printed '{s.baseline}')
    v01 = next(line for line in md.splitlines() if line.startswith("**Verdict.** At fraction 0.1,"))
    assert "the fastest is one of **pin_nb, pin**" in v01
    # pin is the leanest in RAM and VRAM of the two; pin_nb holds the most VRAM.
    assert "the cheapest in memory among them is **pin** (peak RAM PSS 1,000 MB, peak VRAM device 1,500 MB)" in v01
    # each judged by its own noise: both shown slower than the fastest, by a bound above 1 (not "1.00x")
    slower = re.search(
        r"Clearly slower: baseline \(at least ([\d.]+)x slower\), bg \(at least ([\d.]+)x slower\)\.", v01
    )
    assert slower and all(float(x) > 1.1 for x in slower.groups()), v01
    assert "Against baseline: 2 faster, 0 slower, 1 not significantly different" in v01
    v04 = next(line for line in md.splitlines() if line.startswith("**Verdict.** At fraction 0.4,"))
    assert "**pin_nb is the fastest**" in v04
    assert GPU in md and "Figures from **cuda** on" in md


def test_small_gaps_read_as_percent_not_as_one_x():
    # "at least 1.00x slower" would read as "not slower": below 1.1x the gap is given in percent
    assert [slower_by(x) for x in (1.004, 1.0949, 1.1, 2.456)] == ["0.4%", "9.5%", "1.10x", "2.46x"]


def test_plots_and_report_run(study):
    out, client = study["out"], study["client"]
    names = ["epoch_time", "speedup_heatmap", "vram", "ram", "time_vs_memory", "epoch_curves", "drift", "overview"]
    for name in names:
        assert (out / f"{name}.png").stat().st_size > 10_000, name
    assert "![overview.png](overview.png)" in (out / "summary.md").read_text()
    reports = client.search_runs([study["exp_id"]], "tags.`wif.kind` = 'report'")
    assert [r.info.run_name for r in reports] == ["report"]
    artifacts = {a.path for a in client.list_artifacts(reports[0].info.run_id)}
    assert {"summary.csv", "summary.md", "overview.png"} <= artifacts
    # The report run is never read back as a training run.
    runs = load_runs(client, "who_is_faster", RunFilter())
    assert "report" not in set(runs["run_name"]) and len(runs) == 5 * 4 + 5 + 4 + 5 + 1 + 2


def test_many_cells_give_taller_plots_with_every_loader_named(study, tmp_path):
    """A knobs-sized study (40 cells with long names) grows the bar charts instead of squeezing them."""
    client, uri, exp_id = study_store(tmp_path)
    names = ["baseline"] + [f"pin_nb_w8_pf{i}+persistent+out_of_order+forkserver" for i in range(39)]
    for block in range(2):
        for i, name in enumerate(names):
            log_run(client, exp_id, name, 0.4, block, 1.0 + 0.1 * i + 0.01 * block, device="cpu", vram=None)
    out = tmp_path / "report"
    assert main(["--tracking-uri", uri, "--out", str(out), "--no-log"]) == 0
    few, many = (matplotlib.image.imread(d / "epoch_time.png").shape for d in (study["out"], out))
    assert many[0] > 2 * few[0]  # 40 loaders at one fraction need more height than 4 loaders at two
    assert len(pd.read_csv(out / "summary.csv")) == 40


def test_curve_loaders_spread_over_the_speed_order_and_keep_the_baseline():
    loaders = [f"l{i}" for i in range(48)]
    shown = plots.curve_loaders(loaders, "l20", limit=10)
    assert len(shown) == 10 and shown[0] == "l0" and shown[-1] == "l47" and "l20" in shown
    assert shown == sorted(shown, key=loaders.index)  # speed order kept
    assert plots.curve_loaders(loaders[:5], "l20", limit=10) == loaders[:5]
