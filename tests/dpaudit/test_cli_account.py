"""``dpaudit account``: every mechanism command agrees with its mechanism module's privacy map and the accountant
it names, ``events`` and ``ledger`` recompose as the certificate does, and bad input is one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit import from_formula
from dpaudit.accounting import ACCOUNTANTS, get_accountant
from dpaudit.cli import main
from dpaudit.cli_account import ACCOUNTANT_NAMES
from dpaudit.events import PoissonSubsampledGaussianEvent, SelfComposedEvent, compose
from dpaudit.mechanisms.above_threshold import above_threshold_epsilon, above_threshold_event
from dpaudit.mechanisms.exponential import exponential_epsilon, exponential_event
from dpaudit.mechanisms.gaussian import gaussian_event, gaussian_event_delta
from dpaudit.mechanisms.laplace import laplace_epsilon, laplace_event
from dpaudit.mechanisms.repeat_and_select import repeat_and_select_event
from dpaudit.sensitivity import Neighbouring, Norm, declared

ADD_REMOVE = Neighbouring.ADD_REMOVE


def account(*args: str) -> dict:
    result = CliRunner().invoke(main, ["account", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def text(*args: str) -> str:
    result = CliRunner().invoke(main, ["account", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def sens(value: float, norm: Norm = Norm.ABS):
    return declared(value, norm, "given to dpaudit account")


def dpsgd(q: float = 0.0157, sigma: float = 1.0, steps: int = 192) -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring=ADD_REMOVE, sensitivity=from_formula("clipped_gradient_sum", ADD_REMOVE, clip_norm=1.0),
        sample_rate=q, noise_multiplier=sigma, steps=steps, label="dpsgd")


def test_the_accountant_choices_are_the_registry():
    assert set(ACCOUNTANT_NAMES) == set(ACCOUNTANTS)


def test_laplace_calibrates_as_the_session_and_applies_the_module_map():
    out = account("laplace", "--sensitivity", "2", "--epsilon", "0.3")
    event = laplace_event(ADD_REMOVE, sens(2.0), 0.3)
    assert out["mechanism"]["scale"] == event.scale and out["mechanism"]["epsilon_map"] == laplace_epsilon(event)
    assert out["epsilon"] == pytest.approx(laplace_epsilon(event), rel=1e-12) and out["upper_bound"] is True


def test_laplace_from_a_scale_and_composed_counts():
    out = account("laplace", "--sensitivity", "1", "--scale", "2", "--count", "10", "--delta", "1e-6",
                  "--accountant", "basic")
    probe = laplace_event(ADD_REMOVE, sens(1.0), 0.5)
    per = laplace_epsilon(type(probe)(neighbouring=ADD_REMOVE, sensitivity=sens(1.0), epsilon=1.0, scale=2.0,
                                      grid=probe.grid))
    assert out["mechanism"]["epsilon_map"] == per and out["epsilon"] == pytest.approx(10 * per, rel=1e-12)
    assert out["count"] == 10


def test_gaussian_both_ways_matches_the_module_map_and_the_accountant():
    out = account("gaussian", "--sensitivity", "1", "--epsilon", "0.5", "--event-delta", "1e-6", "--delta", "1e-5")
    event = gaussian_event(ADD_REMOVE, sens(1.0), 0.5, 1e-6)
    assert out["mechanism"]["sigma"] == event.sigma
    assert out["mechanism"]["delta_map"] == gaussian_event_delta(event) <= 1e-6
    assert out["epsilon"] == get_accountant("tightest").epsilon(event, 1e-5)
    by_sigma = account("gaussian", "--sensitivity", "1", "--epsilon", "1", "--sigma", "4", "--count", "20",
                       "--delta", "1e-5", "--accountant", "pld")
    leaf = type(event)(neighbouring=ADD_REMOVE, sensitivity=sens(1.0), epsilon=1.0,
                       delta=by_sigma["mechanism"]["delta_map"], sigma=4.0, grid=event.grid)
    assert by_sigma["mechanism"]["delta_map"] == gaussian_event_delta(leaf)
    assert by_sigma["epsilon"] == get_accountant("pld").epsilon(SelfComposedEvent(event=leaf, count=20), 1e-5)


def test_exponential_and_above_threshold_apply_their_maps():
    out = account("exponential", "--sensitivity", "1", "--epsilon", "0.2", "--candidates", "8")
    assert out["mechanism"]["epsilon_map"] == exponential_epsilon(
        exponential_event(ADD_REMOVE, sens(1.0), 0.2, n_candidates=8)) == out["epsilon"]
    rounds = account("above-threshold", "--sensitivity", "0.1", "--epsilon", "0.5", "--rounds", "8", "--delta",
                     "1e-5", "--accountant", "pld")
    event = above_threshold_event(ADD_REMOVE, sens(0.1), 0.5, max_queries=1, rounds=8)
    assert rounds["mechanism"]["epsilon_map"] == above_threshold_epsilon(event.event)
    assert rounds["epsilon"] == get_accountant("pld").epsilon(event, 1e-5) < 4.0  # tighter than 8 x 0.5


@pytest.mark.parametrize("accountant", ["rdp", "pld", "tightest"])
def test_dpsgd_and_repeat_and_select_match_the_accountant(accountant):
    out = account("dpsgd", "--sample-rate", "0.0157", "--noise-multiplier", "1.0", "--steps", "192", "--delta",
                  "1e-5", "--accountant", accountant)
    assert out["epsilon"] == get_accountant(accountant).epsilon(dpsgd(), 1e-5)
    if accountant == "rdp":  # Papernot & Steinke's bounds are Renyi bounds
        best = account("repeat-and-select", "--distribution", "geometric", "--gamma", "0.1", "--sample-rate",
                       "0.0157", "--noise-multiplier", "1.0", "--steps", "192", "--delta", "1e-5", "--accountant",
                       "rdp")
        event = repeat_and_select_event(dpsgd(), "geometric", {"gamma": 0.1})
        assert best["epsilon"] == get_accountant("rdp").epsilon(event, 1e-5) > out["epsilon"]


def test_repeat_and_select_takes_a_base_event_file(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(dpsgd().to_dict()))
    out = account("repeat-and-select", "--distribution", "poisson", "--mu", "8", "--base", str(base), "--delta",
                  "1e-5", "--accountant", "rdp")
    event = repeat_and_select_event(dpsgd(), "poisson", {"mu": 8.0})
    assert out["epsilon"] == get_accountant("rdp").epsilon(event, 1e-5)


@pytest.mark.parametrize(("args", "needle"), [
    (["laplace", "--sensitivity", "1", "--epsilon", "1"], "Canonne, Kamath & Steinke 2020"),
    (["gaussian", "--sensitivity", "1", "--epsilon", "1", "--event-delta", "1e-6", "--delta", "1e-5"], "CKS 2020"),
    (["exponential", "--sensitivity", "1", "--epsilon", "1", "--candidates", "3"], "Dwork & Roth 2014, Thm. 3.10"),
    (["above-threshold", "--sensitivity", "1", "--epsilon", "1", "--rounds", "2"], "Lyu, Su & Li 2017"),
    (["dpsgd", "--sample-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5"],
     "Abadi et al. 2016"),
    (["repeat-and-select", "--distribution", "geometric", "--gamma", "0.5", "--sample-rate", "0.01",
      "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5"], "Papernot & Steinke"),
])
def test_every_command_prints_its_formula_and_paper(args, needle):
    out = text(*args)
    assert out.startswith("epsilon <= ") and "formula (" in out and needle in out
    assert "accountant" in out.splitlines()[0]


def test_events_file_recomposes_a_list_in_the_ledger_format(tmp_path):
    events = [laplace_event(ADD_REMOVE, sens(1.0), 0.1), dpsgd(),
              above_threshold_event(ADD_REMOVE, sens(0.1), 0.5, max_queries=4, rounds=3)]
    path = tmp_path / "events.json"
    path.write_text(json.dumps([e.to_dict() for e in events]))
    out = account("events", str(path), "--delta", "1e-5")
    assert out["epsilon"] == get_accountant("tightest").epsilon(compose(events), 1e-5) and out["events"] == 3
    path.write_text(json.dumps({"events": [e.to_dict() for e in events]}))
    assert account("events", str(path), "--delta", "1e-5", "--accountant", "rdp")["epsilon"] == \
        get_accountant("rdp").epsilon(compose(events), 1e-5)


@pytest.fixture
def demo_like_run(make_session) -> Path:
    """The demo's shape: a Laplace statistic, AboveThreshold rounds charged up front, a DP-SGD training charge."""
    with make_session(epsilon=5.0, delta=1e-5) as s:
        s.laplace(40.0, sensitivity=1.0, epsilon=0.1, label="count")
        s.charge(s.above_threshold_rounds_event(0.05, 0.5, max_queries=8, rounds=3), plugin="session",
                 mechanism="above_threshold")
        s.charge(dpsgd(), plugin="session", mechanism="dp-sgd")
    return s.run_dir


def test_ledger_recomposition_is_the_certificates_claim(demo_like_run):
    claim = json.loads((demo_like_run / "certificate.json").read_text())["claim"]
    out = account("ledger", str(demo_like_run))
    assert (out["epsilon"], out["delta"], out["accountant"]) == (claim["epsilon"], claim["delta"], claim["accountant"])
    assert out["charges"] == 3 and out["certificate_epsilon"] == claim["epsilon"]
    assert "the same" in text("ledger", str(demo_like_run))
    rdp = account("ledger", str(demo_like_run), "--accountant", "rdp", "--delta", "1e-6")
    records = [json.loads(line) for line in (demo_like_run / "ledger.jsonl").read_text().splitlines()]
    from dpaudit.events import PrivacyEvent

    events = [PrivacyEvent.from_dict(r["body"]["event"]) for r in records if r["type"] == "charge"]
    assert rdp["epsilon"] == get_accountant("rdp").epsilon(compose(events), 1e-6) >= claim["epsilon"]
    assert "certificate_epsilon" not in rdp  # a different question than the certificate's


def test_ledger_of_an_adaptive_run_is_its_filter_budget(make_session):
    with make_session(epsilon=2.0, delta=1e-5, adaptive=True) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    out = account("ledger", str(s.run_dir))
    assert (out["epsilon"], out["delta"]) == (2.0, 1e-5)
    refused = CliRunner().invoke(main, ["account", "ledger", str(s.run_dir), "--accountant", "rdp"])
    assert refused.exit_code == 2 and "adaptive" in refused.output


def _bad_events(tmp_path: Path, content: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize("args", [
    ["laplace", "--sensitivity", "1"],
    ["laplace", "--sensitivity", "1", "--epsilon", "1", "--scale", "1"],
    ["laplace", "--sensitivity", "-1", "--epsilon", "1"],
    ["laplace", "--sensitivity", "1", "--epsilon", "nan"],
    ["laplace", "--sensitivity", "1", "--epsilon", "1", "--count", "0"],
    ["laplace", "--sensitivity", "1", "--epsilon", "1", "--delta", "1.5"],
    ["gaussian", "--sensitivity", "1", "--epsilon", "1", "--delta", "1e-5"],
    ["gaussian", "--sensitivity", "1", "--epsilon", "1", "--event-delta", "2", "--delta", "1e-5"],
    ["exponential", "--sensitivity", "1", "--epsilon", "1", "--candidates", "0"],
    ["above-threshold", "--sensitivity", "1", "--epsilon", "1", "--rounds", "0"],
    ["dpsgd", "--sample-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5",
     "--neighbouring", "replace_one"],
    ["dpsgd", "--sample-rate", "1e-300", "--noise-multiplier", "1e-300", "--steps", "10", "--delta", "1e-5"],
    ["repeat-and-select", "--distribution", "geometric", "--gamma", "0.5", "--delta", "1e-5"],
    ["repeat-and-select", "--distribution", "truncated_negative_binomial", "--gamma", "0.5", "--eta", "0.5",
     "--sample-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5"],
    ["laplace", "--sensitivity", "1", "--epsilon", "1", "--accountant", "magic"],
])
def test_bad_mechanism_input_is_one_line_exit_2(args):
    result = CliRunner().invoke(main, ["account", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("content", ["{not json", "[]", "[1]", '[{"kind": "warp_drive"}]', '[{"kind": "laplace"}]',
                                     '{"events": [], "extra": 1}', '[{"kind": "laplace", "epsilon": NaN}]'])
def test_bad_events_file_is_one_line_exit_2(tmp_path, content):
    result = CliRunner().invoke(main, ["account", "events", _bad_events(tmp_path, content), "--delta", "1e-5"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1


def test_ledger_of_a_missing_run_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["account", "ledger", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and result.output.startswith("error: ")
