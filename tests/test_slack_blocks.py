"""The Slack message of an analysis (app.slack.blocks): a real stored analysis renders with its
root cause, fix, recurrence and feedback buttons; log text stays literal; Slack's limits hold."""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx
import pytest

from app.engine.pipeline.library import Library, default_rules_dir, load_library
from app.slack.blocks import MAX_BLOCKS, MAX_HEADER, MAX_SECTION, diagnosis
from tests.conftest import ROOT
from tests.servicekit import LiveServer


def who_acts(kind: str) -> str:
    """The bot's words for a kind: the project's class catalogue."""
    return _catalogue().kind(kind).who


@functools.cache
def _catalogue() -> Library:
    return load_library(default_rules_dir())


API = "/api/v1/analyses"


def _texts(msg: dict[str, Any]) -> list[str]:
    out = []
    for b in msg["blocks"]:
        if "text" in b:
            out.append(b["text"]["text"])
        for e in b.get("elements", []):
            if e.get("type") == "mrkdwn":
                out.append(e["text"])
    return out


def _within_limits(msg: dict[str, Any]) -> None:
    assert len(msg["blocks"]) <= MAX_BLOCKS
    for b in msg["blocks"]:
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= MAX_HEADER
        elif b["type"] == "section":
            assert len(b["text"]["text"]) <= MAX_SECTION
    json.dumps(msg)  # what chat.postMessage is sent


@pytest.mark.slow  # a live server
def test_a_real_analysis_renders_its_cause_fix_recurrence_and_buttons(
    server: LiveServer, client: httpx.Client
) -> None:
    log = (ROOT / "examples" / "ecc-cascade" / "rank2.log").read_bytes()
    for job in ("slack-a", "slack-b"):  # the second is a recurrence of the first (another log)
        body = f"launching {job}\n".encode() + log
        r = client.post(API, content=body, params={"job_id": job}, headers={"Content-Type": "text/plain"})
        assert r.status_code == 201, r.text
    res = r.json()
    url = f"{server.url}/analyses/{res['id']}"
    msg = diagnosis(res, who_acts=who_acts, report_url=url)
    _within_limits(msg)
    header = msg["blocks"][0]["text"]["text"]
    assert header == res["root_cause"]["title"]
    body = "\n".join(_texts(msg))
    assert "hardware.gpu_ecc_error" in body and "who acts: hardware" in body
    # the job's action: retried without the host the log names
    assert "*The job:* Retry the job without 10.12.0.33. (`retry_excluding`)" in body
    assert res["recurrence"]["total"] >= 2
    assert "job slack-b" in body and res["recurrence"]["summary"] in body.replace("&amp;", "&")
    actions = msg["blocks"][-1]
    assert actions["type"] == "actions" and actions["block_id"] == f"analysis:{res['id']}"
    assert {e.get("value") for e in actions["elements"]} >= {res["id"]}
    assert actions["elements"][0]["url"] == url
    assert msg["text"].startswith("Root cause: ")


def test_log_text_is_literal_and_limits_hold() -> None:
    evil = "<!channel> <https://evil.example|click here> ``` closed? & more"
    res = {
        "id": "01ABC",
        "root_cause": {
            "title": "T" * 400,
            "failure_class": "cuda.out_of_memory",
            "kind": "config",
            "confidence": 0.9,
            "explanation": "x " * 2000,
            "evidence": [{"file": "<b>.log", "line": 3, "text": evil}],
            "patches": [{"why": "<@U123> because", "rendered": "A=1\n" * 3000}],
        },
        "recurrence": {"total": 3, "summary": "seen 3 times <!here>"},
        "suspect_hosts": [{"host": "<node-7>"}],
        "metadata": {"job_id": "job<&>"},
    }
    msg = diagnosis(res, who_acts=who_acts, report_url="https://lt.example/analyses/01ABC")
    _within_limits(msg)
    body = "\n".join(_texts(msg))
    for raw in ("<!channel>", "<https://evil", "<@U123>", "<!here>", "<node-7>", "<b>", "job<&>"):
        assert raw not in body, raw
    assert "&lt;!channel&gt;" in body and "&lt;@U123&gt;" in body
    evidence = next(t for t in _texts(msg) if "closed?" in t)
    assert evidence.count("```") == 2  # the log's backticks did not close the block early
    fix = next(t for t in _texts(msg) if t.startswith("*The fix*"))
    assert "whole patch is in <https://lt.example/analyses/01ABC|the report>" in fix


def test_an_unknown_result_says_what_to_collect() -> None:
    res = {
        "id": "01XYZ",
        "root_cause": None,
        "next_steps": ["Attach the full traceback of the first rank that failed"],
        "possible_causes": [{"failure_class": "cuda.out_of_memory", "title": "CUDA out of memory"}],
    }
    msg = diagnosis(res, who_acts=who_acts, report_url="https://lt.example/analyses/01XYZ", feedback=False)
    _within_limits(msg)
    body = "\n".join(_texts(msg))
    assert msg["blocks"][0]["text"]["text"] == "No known failure matched"
    assert "possibly *cuda.out_of_memory*" in body and "first rank that failed" in body
    assert "The job" not in body  # a resource without an action (stored before it existed) has none
    res["action"] = {"decision": "investigate", "why": ["No known failure matched: <nothing> says"]}
    body = "\n".join(
        _texts(diagnosis(res, who_acts=who_acts, report_url="https://lt.example/a/1", feedback=False))
    )
    assert "*The job:* Investigate before rerunning" in body and "&lt;nothing&gt;" in body
    assert [e["action_id"] for e in msg["blocks"][-1]["elements"]] == ["open_report"]


def test_remediation_becomes_mrkdwn_and_inserted_values_stay_literal() -> None:
    from app.engine.pipeline.triage import md_literal
    from app.slack.blocks import mrkdwn

    captured = md_literal("[click](https://evil.example/x) **now** <!channel>")
    text = mrkdwn(
        f"Drain the node, see **the runbook** at [docs](https://wiki.example/ecc); host `{captured}`"
    )
    assert "*the runbook*" in text and "<https://wiki.example/ecc|docs>" in text
    # the value from the log: shown as written, no Slack link, no mention, no bold
    assert "<https://evil.example" not in text and "<!channel>" not in text
    assert "[click](https://evil.example/x) **now** &lt;!channel&gt;" in text


@pytest.mark.slow  # a live server
def test_the_fix_text_is_in_the_message(server: LiveServer, client: httpx.Client) -> None:
    log = (ROOT / "examples" / "ecc-cascade" / "rank2.log").read_bytes()
    r = client.post(API, content=log, headers={"Content-Type": "text/plain"})
    res = r.json()
    msg = diagnosis(res, who_acts=who_acts, report_url=f"{server.url}/analyses/{res['id']}")
    fix = next(t for t in _texts(msg) if t.startswith("*What to do*"))
    assert "nvidia-smi" in fix and len(fix) <= MAX_SECTION


def test_wrapped_remediation_lines_are_joined_and_code_blocks_kept() -> None:
    from app.slack.blocks import mrkdwn

    text = mrkdwn(
        "Drain it:\n- find the GPU: `nvidia-smi` on\n  the node;\n- reset it.\nThen resume.\n```\na\nb\n```\nafter"
    )
    assert (
        text
        == "Drain it:\n• find the GPU: `nvidia-smi` on the node;\n• reset it. Then resume.\n```\na\nb\n```\nafter"
    )
