"""The rule schema and loader: errors name the file and the field; the cache never goes stale."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from app.engine.pipeline.library import load_library
from app.errors import RuleError
from tests.conftest import ROOT, make_rules_dir

GOOD = """
id: good-rule
version: 1
status: stable
failure_class: host.disk_full
severity: error
title: No space left on device
match:
  any: ['No space left on device']
explanation: The filesystem the job writes to is full.
remediation: Free space or write elsewhere.
"""


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (("severity: error", "severity: fatal"), "severity"),
        (("title:", "titel: x\ntitle:"), "titel"),  # unknown keys are rejected
        (("failure_class: host.disk_full", "failure_class: host.disk_fulll"), "failure-classes.yaml"),
        (("'No space left on device'", "'^No space left'"), "anchored"),
        (("'No space left on device'", "'(unclosed'"), "invalid regex"),
        (("version: 1", "version: 0"), "version"),
        (("id: good-rule", "id: Bad_Rule"), "id"),
        (("remediation: Free space or write elsewhere.", "remediation: 'Free {nope} space'"), "nope"),
        # an expression that cannot parse would only show as a patch never offered: refused at load
        (
            (
                "remediation: Free space or write elsewhere.",
                "remediation: Free space.\npatches:\n"
                "  - {target: env, path: [TMPDIR], value: /big, why: more room, when: 'a )\n or b'}",
            ),
            "`when`",
        ),
    ],
)
def test_schema_errors_name_file_and_field(tmp_path: Path, mutation: tuple[str, str], message: str) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD.replace(*mutation)})
    with pytest.raises(RuleError) as info:
        load_library(root)
    assert "good-rule.yaml" in str(info.value)
    assert message in str(info.value)


def test_window_is_required_for_all_and_not(tmp_path: Path) -> None:
    text = GOOD.replace("  any: ['No space left on device']", "  any: ['No space left']\n  all: ['Errno 28']")
    with pytest.raises(RuleError, match="window"):
        load_library(make_rules_dir(tmp_path, {"host/good-rule.yaml": text}))


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD, "other/good-rule.yaml": GOOD})
    with pytest.raises(RuleError, match="duplicate id"):
        load_library(root)


def test_library_cache_is_keyed_by_file_stats(tmp_path: Path) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD})
    cache = tmp_path / "cache"
    first = load_library(root, cache_dir=cache)
    assert len(list(cache.glob("library-*.pickle"))) == 1
    again = load_library(root, cache_dir=cache)
    assert [r.rule.id for r in again.rules] == ["good-rule"]
    rule_file = root / "host" / "good-rule.yaml"
    rule_file.write_text(GOOD.replace("version: 1", "version: 2"))
    st = rule_file.stat()
    os.utime(rule_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = load_library(root, cache_dir=cache)
    assert changed.rules[0].rule.version == 2 and first.rules[0].rule.version == 1


def test_library_key_sees_every_yaml_file_at_any_depth(tmp_path: Path) -> None:
    """The key walks the tree itself (os.walk): a change to a top-level file, to a rule two
    folders down, or a new file must each give a new key; a file that is not YAML must not."""
    from app.engine.pipeline.library import _library_key

    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD})
    keys = [_library_key(root)]
    (root / "notes.txt").write_text("not part of the library\n")
    assert _library_key(root) == keys[-1]
    top = next(p for p in sorted(root.glob("*.yaml")))
    top.write_text(top.read_text() + "\n# touched\n")
    keys.append(_library_key(root))
    (root / "host" / "deeper").mkdir()
    (root / "host" / "deeper" / "x.yaml").write_text("{}\n")
    keys.append(_library_key(root))
    (root / "host" / "deeper" / "x.yaml").write_text("{}\n# longer\n")
    keys.append(_library_key(root))
    assert len(set(keys)) == len(keys)
    assert _library_key(root) == keys[-1]  # and stable


def test_the_light_framework_list_equals_the_schema_type() -> None:
    from app.engine.pipeline.framework_names import FRAMEWORK_NAMES
    from app.engine.pipeline.library import FRAMEWORKS

    assert FRAMEWORK_NAMES == FRAMEWORKS


def test_the_cli_scan_defaults_equal_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import fields

    from app.scan_settings import ScanSettings, scan_settings
    from app.settings import Settings

    for k in [k for k in os.environ if k.startswith("LOGTRIAGE_")]:
        monkeypatch.delenv(k)
    light, full = scan_settings(), Settings()
    for f in fields(ScanSettings):
        assert getattr(light, f.name) == getattr(full, f.name), f.name
    monkeypatch.setenv("LOGTRIAGE_MAX_BYTES", "1234")
    from app.settings import get_settings

    get_settings.cache_clear()
    try:
        assert scan_settings().max_bytes == 1234
    finally:
        get_settings.cache_clear()


def test_who_acts_is_said_once_in_the_class_catalogue() -> None:
    lib = load_library(ROOT / "rules")
    used = {c.kind for c in lib.classes.values()}
    assert used <= set(lib.kinds), "every class's kind has its words in failure-classes.yaml"
    assert "unknown" in lib.kinds, "an analysis with no cause is shown in the catalogue's words too"
    for k in lib.kinds.values():
        assert k.label and k.who and k.action.endswith("."), k
    # a kind a stored analysis names but the catalogue has since dropped still renders
    assert lib.kind("retired").label == "Retired"


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (('kind: hardware, summary: "Uncorrectable', 'kind: hardwar, summary: "Uncorrectable'), "hardwar"),
        (('    who: "hardware: drain the node"\n', ""), "lacks who"),
    ],
)
def test_a_catalogue_kind_must_be_complete_and_known(
    tmp_path: Path, mutation: tuple[str, str], message: str
) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD})
    catalogue = root / "failure-classes.yaml"
    text = catalogue.read_text(encoding="utf-8")
    assert mutation[0] in text
    catalogue.write_text(text.replace(*mutation, 1), encoding="utf-8")
    with pytest.raises(RuleError, match=message) as info:
        load_library(root)
    assert "failure-classes.yaml" in str(info.value)


STEPPED = GOOD.replace(
    "remediation: Free space or write elsewhere.",
    """remediation: Free space or write elsewhere.
steps:
  - do: 'verl keeps fewer checkpoints with `trainer.max_actor_ckpt_to_keep`'
    frameworks: [verl]
  - do: 'It was writing after the job had trained: the checkpoint, most likely'
    when: 'metric_lines > 0'
    because: [metric_lines]""",
)
DISK_FULL = "OSError: [Errno 28] No space left on device\n"
VERL_LINE = '  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in main\n'
STEP_LINES = "".join(f"step {i} loss {1.0 / (i + 1):.4f} lr 1e-5 grad_norm 0.5\n" for i in range(12))


def _remediation(root: Path, tmp_path: Path, text: str) -> str:
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import TriageOptions, triage

    log = tmp_path / "job.log"
    log.write_text(text)
    sources, _ = collect_sources([str(log)])
    compiled = CompiledLibrary(load_library(root), engine="regex")
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    assert a.root_cause is not None and a.root_cause.rule_id == "good-rule"
    return a.root_cause.remediation


def test_a_step_shows_only_where_its_framework_and_condition_hold(tmp_path: Path) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": STEPPED})
    (root / "frameworks.yaml").write_text((ROOT / "rules" / "frameworks.yaml").read_text())
    bare = _remediation(root, tmp_path, DISK_FULL)
    assert bare.startswith("Free space or write elsewhere.")
    assert "max_actor_ckpt_to_keep" not in bare, "a verl key shown to a job that is not verl"
    assert "after the job had trained" not in bare, "its condition does not hold: no step ran"
    verl = _remediation(root, tmp_path, VERL_LINE + DISK_FULL)
    assert "- verl keeps fewer checkpoints with `trainer.max_actor_ckpt_to_keep`" in verl
    trained = _remediation(root, tmp_path, STEP_LINES + DISK_FULL)
    assert "- It was writing after the job had trained" in trained
    assert "(the log: metric_lines " in trained, "the step says which fact chose it"


def test_the_lint_finds_a_frameworks_keys_in_text_every_job_gets(tmp_path: Path) -> None:
    from app.engine.ruledev.ruletest import lint

    loose = GOOD.replace(
        "remediation: Free space or write elsewhere.",
        "remediation: Free space, e.g. verl `trainer.max_actor_ckpt_to_keep=2`.",
    )
    loose_patch = GOOD.replace(
        "remediation: Free space or write elsewhere.",
        "remediation: Free space or write elsewhere.\n"
        "patches:\n  - {target: hydra, path: [trainer, max_actor_ckpt_to_keep], value: 2, why: keep fewer}",
    )
    fenced_patch = loose_patch.replace("why: keep fewer}", "why: keep fewer, frameworks: [verl]}")
    frameworks = (ROOT / "rules" / "frameworks.yaml").read_text()
    for text, flagged in ((loose, True), (STEPPED, False), (loose_patch, True), (fenced_patch, False)):
        sub = Path(tempfile.mkdtemp(dir=tmp_path))
        root = make_rules_dir(sub, {"host/good-rule.yaml": text})
        (root / "frameworks.yaml").write_text(frameworks)
        issues, _ = lint(load_library(root))
        found = [i for i in issues if "keys for every job" in i.message]
        assert bool(found) == flagged, found
        assert all(i.level == "error" for i in found)
        if flagged:
            assert "verl" in found[0].message and "trainer.max_actor_ckpt_to_keep" in found[0].message


@pytest.mark.parametrize(
    ("fact", "message"),
    [
        ("  bad:\n    type: int\n    value: 'a )('\n", "value:"),
        (
            "  both:\n    type: int\n    value: '1'\n    patterns: ['x (?P<value>\\d+)']\n",
            "either patterns or a value",
        ),
    ],
)
def test_a_computed_fact_is_checked_at_load(tmp_path: Path, fact: str, message: str) -> None:
    root = make_rules_dir(tmp_path, {"host/good-rule.yaml": GOOD})
    facts = root / "facts.yaml"
    facts.write_text(facts.read_text(encoding="utf-8") + fact, encoding="utf-8")
    with pytest.raises(RuleError, match=message):
        load_library(root)


def test_a_key_defined_twice_is_refused_not_silently_overridden(tmp_path: Path) -> None:
    # two merged edits each adding the same fact: YAML would keep the second without a word
    rules = make_rules_dir(tmp_path, {})
    facts = rules / "facts.yaml"
    text = facts.read_text()
    facts.write_text(
        text.rstrip("\n")
        + "\n  twice_seen:\n    type: str\n    patterns: ['(?P<value>twice one)']\n"
        + "  twice_seen:\n    type: str\n    patterns: ['(?P<value>twice two)']\n"
    )
    with pytest.raises(RuleError, match="duplicate key 'twice_seen'"):
        load_library(rules)
