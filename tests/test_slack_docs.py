"""The Slack app manifests and docs cannot drift from the bot: the command, the shortcut, the
events the listeners take, the scopes of the Web API methods the bot calls, every setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from app.settings import Settings
from app.slack import bot
from tests.conftest import ROOT

DOCS = ROOT / "docs"
MANIFESTS = [DOCS / "slack" / "manifest.yaml", DOCS / "slack" / "manifest-socket.yaml"]
# the scope each Web API method the bot calls needs (api.slack.com/methods)
SCOPES = {
    "chat_postMessage": "chat:write",
    "chat_postEphemeral": "chat:write",
    "chat_update": "chat:write",
    "files_info": "files:read",
    "reactions_add": "reactions:write",
    "reactions_remove": "reactions:write",
    # a modal opened in answer to a click: the click's trigger_id is its authority, no scope
    "views_open": None,
}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_the_listeners(path: Path) -> None:
    m = yaml.safe_load(path.read_text())
    features = m["features"]
    assert [c["command"] for c in features["slash_commands"]] == [bot.COMMAND]
    assert [(s["type"], s["callback_id"]) for s in features["shortcuts"]] == [("message", bot.SHORTCUT_ID)]
    events = set(m["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "message.channels", "message.groups", "message.im"} <= events
    assert m["settings"]["interactivity"]["is_enabled"] is True
    scopes = set(m["oauth_config"]["scopes"]["bot"])
    source = (ROOT / "app" / "slack" / "bot.py").read_text()
    called = set(re.findall(r"client\.(\w+)\(", source)) | set(re.findall(r'"(reactions_\w+)"', source))
    assert called and called <= set(SCOPES), f"a Web API method without a known scope: {called - set(SCOPES)}"
    assert {SCOPES[c] for c in called} - {None} | {
        "commands",
        "app_mentions:read",
        "channels:history",
        "im:history",
    } <= scopes
    socket = m["settings"]["socket_mode_enabled"]
    urls = re.findall(r"https://\S+/slack/events", path.read_text())
    assert (socket and not urls) or (not socket and len(urls) == 3)


def test_docs_name_every_slack_setting_and_the_manifests() -> None:
    text = (DOCS / "slack.md").read_text()
    for name in Settings.model_fields:
        if name.startswith("slack_"):
            assert f"`LOGTRIAGE_{name.upper()}`" in text, name
    for p in MANIFESTS:
        assert f"slack/{p.name}" in text


@pytest.mark.slow  # a fresh Python process importing the whole service
def test_the_service_imports_no_slack_library_until_the_bot_is_configured() -> None:
    import subprocess
    import sys

    code = "import sys, app.http.main; print(sorted(m for m in ('slack_bolt', 'slack_sdk', 'aiohttp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
