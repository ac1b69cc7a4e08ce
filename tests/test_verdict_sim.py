"""bench/verdict_sim.py: the retry-policy simulation is deterministic, follows rules/verdicts.yaml,
and measures what it says (issue 24, "Policy simulation"). A small fleet keeps each run short."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("verdict_sim", ROOT / "bench" / "verdict_sim.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["verdict_sim"] = mod
    spec.loader.exec_module(mod)
    return mod


def small(sim, seed=3, **kw):
    return sim.simulate(seed=seed, nodes=48, days=3.0, **kw)


def by_policy(out):
    return {r["policy"]: r for r in out["results"]}


def test_same_seed_same_figures_other_seed_other_figures(sim):
    a, b, c = small(sim, 5), small(sim, 5), small(sim, 6)
    assert a == b
    assert a["results"] != c["results"]


def test_never_retry_loses_nothing_to_failed_retries(sim):
    r = by_policy(small(sim))["never-retry"]
    assert r["failures"] > 0  # there were failures to retry, and none was
    assert r["auto_retries"] == 0
    assert r["gpu_h_failed_retries"] == 0.0
    assert r["human_interventions"] == r["failures"]


def test_always_retry_wastes_more_than_logtriage_on_repeating_faults(sim):
    out = small(sim)
    assert out["jobs_with_own_fault"] > 0  # the mix holds config/code faults that repeat
    r = by_policy(out)
    assert r["always-retry"]["gpu_h_failed_retries"] > r["logtriage"]["gpu_h_failed_retries"]
    assert r["always-retry"]["gpu_h_failed_retries"] > r["logtriage+history"]["gpu_h_failed_retries"]


def test_the_decision_table_is_read_from_the_yaml(sim, tmp_path):
    table = yaml.safe_load((ROOT / "rules" / "verdicts.yaml").read_text())
    assert table["classes"]["cuda.out_of_memory"]["decision"] == "fix_and_rerun"
    for cls in ("cuda.out_of_memory", "python.unhandled_exception"):
        table["classes"][cls]["decision"] = "retry"
    changed = tmp_path / "verdicts.yaml"
    changed.write_text(yaml.safe_dump(table))
    policies = ("logtriage",)
    before = by_policy(small(sim, policies=policies))["logtriage"]
    after = by_policy(small(sim, policies=policies, verdicts=changed))["logtriage"]
    assert after["decisions"].get("retry", 0) > before["decisions"].get("retry", 0)
    assert after["gpu_h_failed_retries"] > before["gpu_h_failed_retries"]


def test_history_turns_repeating_ambiguous_failures_into_fixes(sim):
    out = sim.simulate(seed=1, nodes=96, days=4.0, policies=("logtriage", "logtriage+history"))
    r = by_policy(out)
    # an ambiguous class (a collective timeout from a hang in the code) is retried by the table
    # alone; once its reruns are known to fail, with_history sends it to a fix instead
    assert r["logtriage"]["history_flips"] == 0
    assert r["logtriage+history"]["history_flips"] > 0
    assert r["logtriage+history"]["decisions"].get("retry", 0) < r["logtriage"]["decisions"]["retry"]


def test_markdown_table_and_target(sim):
    out = small(sim)
    text = sim.markdown(out)
    assert "| always-retry |" in text and "| logtriage+history |" in text
    t = sim.target(out)
    assert set(t) == {"policy", "failed_retry_gpu_h_cut", "jobs_finished_delta", "holds"}
