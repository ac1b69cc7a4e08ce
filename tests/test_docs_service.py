"""Docs that cannot drift: the settings table in docs/service.md is generated from Settings."""

from __future__ import annotations

import re

from app.settings import Settings, settings_table
from tests.conftest import ROOT


def test_settings_table_matches_the_settings_class() -> None:
    text = (ROOT / "docs" / "service.md").read_text()
    m = re.search(r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", text, re.S)
    assert m, "docs/service.md lost its settings-table markers"
    assert m.group(1) == settings_table(), "regenerate it: python -m app.settings"


def test_every_setting_is_documented_with_a_description() -> None:
    for name, info in Settings.model_fields.items():
        assert info.description, f"setting {name} has no description"
        assert f"`LOGTRIAGE_{name.upper()}`" in settings_table()


def test_service_docs_name_the_endpoints_and_statuses() -> None:
    text = (ROOT / "docs" / "service.md").read_text()
    for needle in (
        "POST /api/v1/analyses",
        "report.html",
        "/api/v1/stats",
        "/readyz",
        "Idempotency-Key",
        "413",
    ):
        assert needle in text
