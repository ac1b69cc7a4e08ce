"""A scan worker starts from the validated library the cache keeps, as the CLI does: validating
every rule file again took each worker over a second, and `/readyz` waited for all of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.engine.pipeline import library as library_mod
from app.service import worker
from tests.servicekit import make_settings


def test_workers_load_the_cached_library_and_validate_a_changed_rule_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(library_mod.default_rules_dir(), rules, ignore=shutil.ignore_patterns("*.log"))
    settings = make_settings(tmp_path / "data", None, rules_dir=rules, cache_dir=tmp_path / "cache")

    validated: list[Path] = []
    real = library_mod._load_library

    def counting(root: Path) -> library_mod.Library:
        validated.append(root)
        return real(root)

    monkeypatch.setattr(library_mod, "_load_library", counting)
    first = worker.build_compiled(settings)
    assert len(validated) == 1 and list((tmp_path / "cache").glob("library-*.pickle"))
    second = worker.build_compiled(settings)  # a second worker, or the next start
    assert len(validated) == 1, "the second worker validated the YAML again instead of the cache"
    assert second.library.version == first.library.version
    assert [lr.rule.id for lr in second.library.rules] == [lr.rule.id for lr in first.library.rules]

    # a rule file changed on disk: the cache misses and the new text is what the worker runs
    path = next(lr.path for lr in first.library.rules if lr.rule.id == "host-disk-full")
    old_version = first.library.get("host-disk-full").rule.version  # type: ignore[union-attr]
    text = path.read_text()
    path.write_text(text.replace(f"\nversion: {old_version}\n", f"\nversion: {old_version + 1}\n", 1))
    third = worker.build_compiled(settings)
    assert len(validated) == 2
    changed = third.library.get("host-disk-full")
    assert changed is not None and changed.rule.version == old_version + 1
