"""The rule schema and loader: errors name the file and the field; the cache never goes stale."""

from __future__ import annotations

import os
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
