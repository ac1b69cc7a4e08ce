"""The Slack bot end to end: the real slack_bolt / slack_sdk stack inside the real service
(uvicorn, SQLite and PostgreSQL) against a local fake of Slack's Web API (tests/slackfake.py).

Every wait is on a condition (a recorded call, a counter), never on a sleep.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.servicekit import (
    ECC,
    NCCL_TIMEOUT,
    OOM,
    LiveServer,
    free_port,
    live_server,
    make_settings,
    training_log,
)
from tests.slackfake import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    fake_slack,
    file_share,
    mention,
    post_event,
    post_form,
    sign,
)

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
ECC_LOG = (ROOT / "examples" / "ecc-cascade" / "rank2.log").read_bytes()


def slack_settings(data_dir: Path, db_url: str, fake: FakeSlack, **extra: Any) -> Any:
    return make_settings(
        data_dir,
        db_url,
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_api_url=fake.api_url,
        public_url="http://logtriage.test",
        **extra,
    )


@pytest.fixture(scope="module")
def fake(db_url: str) -> Iterator[FakeSlack]:
    # one per backend: the channels a test posts to are counted per run
    with fake_slack() as f:
        yield f


@pytest.fixture(scope="module")
def bot_server(
    db_url: str, tmp_path_factory: pytest.TempPathFactory, fake: FakeSlack
) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("slack-data")
    with live_server(slack_settings(data, db_url, fake)) as srv:
        yield srv


@pytest.fixture
def bot(bot_server: LiveServer) -> Iterator[httpx.Client]:
    with bot_server.client() as c:
        yield c


def posts(fake: FakeSlack, channel: str, *, method: str = "chat.postMessage") -> list[dict[str, Any]]:
    return [c.params for c in fake.of(method) if c.params.get("channel") == channel]


def blocks_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    b = params.get("blocks")
    return json.loads(b) if isinstance(b, str) else list(b or [])


def header(params: dict[str, Any]) -> str:
    return next(b["text"]["text"] for b in blocks_of(params) if b["type"] == "header")


def answered(fake: FakeSlack, channel: str) -> bool:
    """The bot is done with a message: its last reaction (after the reply is posted and kept)."""
    done = ("white_check_mark", "grey_question", "x")
    return any(p.get("name") in done for p in posts(fake, channel, method="reactions.add"))


def analyses_count(srv: LiveServer) -> int:
    from sqlalchemy import func, select

    from app.db.models import Analysis

    with srv.ctx.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(Analysis)) or 0)


def analysis_id_of(params: dict[str, Any]) -> str:
    actions = next(b for b in blocks_of(params) if b["type"] == "actions")
    return str(actions["block_id"]).split(":", 1)[1]


# --- configuration ---------------------------------------------------------------------------------


def test_unconfigured_route_is_404_with_how_to_turn_it_on(client: httpx.Client) -> None:
    r = client.post("/slack/events", content="{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "LOGTRIAGE_SLACK_BOT_TOKEN" in r.json()["detail"]


def test_url_verification_challenge(bot: httpx.Client) -> None:
    r = post_event(
        bot,
        {
            "type": "url_verification",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "token": "x",
        },
    )
    assert r.status_code == 200
    assert "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" in r.text


@pytest.mark.parametrize("case", ["bad", "stale", "missing"])
def test_bad_or_stale_signature_is_401_and_nothing_runs(
    bot: httpx.Client, fake: FakeSlack, case: str
) -> None:
    channel = f"C0SIG{case.upper():<6}".replace(" ", "X")[:11]
    body = json.dumps(file_share(channel, "1700000001.000100", [{"id": "FNOPE", "name": "x.log"}]))
    if case == "bad":
        headers = sign(body, secret="not-the-secret")
    elif case == "stale":
        headers = sign(body, timestamp=1_600_000_000)  # years old: outside the 5-minute window
    else:
        headers = {}
    r = bot.post("/slack/events", content=body, headers={"Content-Type": "application/json", **headers})
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert not posts(fake, channel) and not [
        c for c in fake.of("files.info") if c.params.get("file") == "FNOPE"
    ]


# malformed requests: (body, Content-Type, status when correctly signed); unsigned, each is a 401
JSON, FORM = "application/json", "application/x-www-form-urlencoded"
MALFORMED: dict[str, tuple[bytes, str, int]] = {
    "not JSON": (b'{"type": "event_callback", ', JSON, 400),
    "a JSON array": (b'[{"type": "event_callback"}]', JSON, 400),
    "a JSON string": (b'"event_callback"', JSON, 400),
    "JSON null": (b"null", JSON, 400),
    "a JSON object of no Slack type": (b'{"hello": "world"}', JSON, 400),
    "an event_callback without its event": (b'{"type": "event_callback", "event": [1]}', JSON, 400),
    "payload= that is not JSON": (b"payload=%7Bnope", FORM, 400),
    "payload= JSON that is not an object": (b"payload=%5B1%2C2%5D", FORM, 400),
    "payload= JSON null": (b"payload=null", FORM, 400),
    "payload= twice": (b"payload=%7B%7D&payload=%7B%7D", FORM, 400),
    "a form that is neither a command nor a payload": (b"a=b&c=d", FORM, 400),
    "a form that is not a form": (b"%%%=&&&", FORM, 400),
    "empty body (JSON)": (b"", JSON, 400),
    "empty body (form)": (b"", FORM, 400),
    "wrong Content-Type": (b'{"type": "url_verification", "challenge": "x"}', "text/plain", 400),
    "no Content-Type": (b'{"type": "url_verification", "challenge": "x"}', "", 400),
    "multipart": (b"--x\r\n\r\n--x--\r\n", "multipart/form-data; boundary=x", 400),
    "invalid UTF-8 (JSON)": (b'{"type": "\xff\xfe"}', JSON, 400),
    "invalid UTF-8 (form)": (b"command=%2Ftriage&text=\xff\xfe", FORM, 400),
    "NUL bytes": (b'{"type": "url_verification", "challenge": "\x00"}\x00', JSON, 400),
    "a huge body": (b'{"type": "event_callback", "x": "' + b"a" * (2 << 20) + b'"}', JSON, 413),
}


def _signed(body: bytes, *, secret: str = SIGNING_SECRET, timestamp: str | None = None) -> dict[str, str]:
    ts = timestamp if timestamp is not None else str(int(time.time()))
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def store_counts(srv: LiveServer) -> dict[str, int]:
    from sqlalchemy import func, select

    from app.db.models import Base

    with srv.ctx.db.read() as s:
        return {
            t.name: int(s.scalar(select(func.count()).select_from(t)) or 0)
            for t in Base.metadata.sorted_tables
        }


def _problem(r: httpx.Response, status: int, what: str) -> dict[str, Any]:
    assert r.status_code == status, (what, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/problem+json"), (what, r.headers)
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["type"].startswith("/problems/"), (what, body)
    return body


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_bodies_are_4xx_problems_signed_or_not(
    bot_server: LiveServer, bot: httpx.Client, fake: FakeSlack, kind: str
) -> None:
    body, ctype, signed_status = MALFORMED[kind]
    headers = {"Content-Type": ctype} if ctype else {}
    before, calls = store_counts(bot_server), len(fake.calls)
    unsigned = bot.post("/slack/events", content=body, headers=headers)
    if signed_status == 413:  # refused by its size before anything else (a signature covers all of it)
        _problem(unsigned, 413, kind)
    else:  # nothing about the body is told to a sender who cannot sign
        assert _problem(unsigned, 401, kind)["type"] == "/problems/unauthorized"
    forged = bot.post("/slack/events", content=body, headers={**headers, **_signed(body, secret="nope")})
    _problem(forged, 413 if signed_status == 413 else 401, kind)
    signed = bot.post("/slack/events", content=body, headers={**headers, **_signed(body)})
    _problem(signed, signed_status, kind)
    assert store_counts(bot_server) == before, kind  # no delivery claimed, no analysis
    assert len(fake.calls) == calls, kind  # and nothing said to Slack


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Slack-Request-Timestamp": "soon"},
        {"X-Slack-Request-Timestamp": "1e9"},
        {"X-Slack-Request-Timestamp": "+now"},  # int() takes it; it is not Slack's form
        {"X-Slack-Request-Timestamp": "9" * 400},
        {"X-Slack-Request-Timestamp": "-1"},
        {"X-Slack-Request-Timestamp": ""},
        {"X-Slack-Signature": "v0=zz"},
        {"X-Slack-Signature": "sha1=abc"},
        {"X-Slack-Signature": ""},
    ],
    ids=["word", "float", "plus", "huge", "negative", "empty-ts", "short-sig", "other-scheme", "empty-sig"],
)
def test_malformed_signature_headers_are_401(
    bot_server: LiveServer, bot: httpx.Client, headers: dict[str, str]
) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "abc"}).encode()
    before = store_counts(bot_server)
    ts = headers.get("X-Slack-Request-Timestamp")
    if ts == "+now":
        ts = headers["X-Slack-Request-Timestamp"] = f"+{int(time.time())}"
    signed = _signed(body, timestamp=ts) if ts is not None else _signed(body)
    r = bot.post("/slack/events", content=body, headers={"Content-Type": JSON, **signed, **headers})
    _problem(r, 401, str(headers))
    assert store_counts(bot_server) == before


# --- triggers ----------------------------------------------------------------------------------------


def test_file_share_gets_one_threaded_diagnosis(
    bot_server: LiveServer, bot: httpx.Client, fake: FakeSlack
) -> None:
    channel, ts = "C0FILESHAR", "1700000100.000100"
    info = fake.add_file("F0ECC00001", "rank2.log.gz", gzip.compress(ECC_LOG), mimetype="application/gzip")
    r = post_event(
        bot,
        file_share(channel, ts, [{"id": info["id"], "name": info["name"], "mimetype": "application/gzip"}]),
    )
    assert r.status_code == 200
    fake.wait_for(
        lambda f: (
            len(posts(f, channel)) == 1
            and any(
                c.params.get("name") in ("white_check_mark", "grey_question")
                for c in f.of("reactions.add")
                if c.params.get("channel") == channel
            )
        )
    )
    reply = posts(fake, channel)[0]
    assert reply["thread_ts"] == ts
    assert "ECC" in header(reply) or "ecc" in header(reply).lower()
    text = json.dumps(blocks_of(reply))
    assert "hardware.gpu_ecc_error" in text
    assert f"http://logtriage.test/analyses/{analysis_id_of(reply)}" in text
    # the analysis is stored, from Slack
    got = bot.get(f"{API}/{analysis_id_of(reply)}").json()
    assert got["source"] == "slack" and got["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
    # progress: eyes first, then a check; the file was fetched with the bot token
    reactions = [
        (c.method, c.params.get("name"))
        for c in fake.calls
        if c.params.get("channel") == channel and c.method.startswith("reactions")
    ]
    assert reactions[0] == ("reactions.add", "eyes") and ("reactions.add", "white_check_mark") in reactions
    assert ("F0ECC00001", f"Bearer {BOT_TOKEN}") in fake.downloads


def test_retried_event_and_a_second_worker_answer_once(
    db_url: str, bot_server: LiveServer, bot: httpx.Client, fake: FakeSlack, tmp_path: Path
) -> None:
    channel, ts = "C0RETRIES1", "1700000200.000100"
    info = fake.add_file("F0RETRY001", "oom.log", training_log(OOM.format(gib="2.00")).encode())
    payload = file_share(channel, ts, [{"id": info["id"], "name": "oom.log"}])
    # a second server process on the same database (another worker, or the next release)
    with (
        live_server(slack_settings(bot_server.settings.data_dir, db_url, fake)) as second,
        second.client() as other,
    ):
        assert post_event(bot, payload).status_code == 200
        assert (
            post_event(
                bot, payload, **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
            ).status_code
            == 200
        )
        assert post_event(other, payload).status_code == 200
        bots = [bot_server.app.state.slack_bot, second.app.state.slack_bot]

        def all_taken(f: FakeSlack) -> bool:
            return (
                sum(b.stats["events"] for b in bots) >= 3
                and sum(b.stats["duplicates"] for b in bots) == 2
                and len(posts(f, channel)) >= 1
            )

        fake.wait_for(all_taken)
        fake.wait_for(
            lambda f: (
                sum(b.stats["handled"] for b in bots) >= 1
                and any(
                    c.params.get("name") != "eyes"
                    for c in f.of("reactions.add")
                    if c.params.get("channel") == channel
                )
            )
        )
    assert len(posts(fake, channel)) == 1
    assert "out of memory" in header(posts(fake, channel)[0]).lower()


def test_mention_with_a_pasted_log_in_a_code_block(bot: httpx.Client, fake: FakeSlack) -> None:
    channel, ts = "C0MENTION1", "1700000300.000100"
    text = f"<@UBOTLOGTR> our job died, what is it?\n```{training_log(NCCL_TIMEOUT, steps=3)}```"
    r = post_event(
        bot,
        mention(channel, ts, text),
    )
    assert r.status_code == 200
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    reply = posts(fake, channel)[0]
    assert reply["thread_ts"] == ts
    assert "nccl" in json.dumps(blocks_of(reply)).lower()


def test_a_mention_without_a_log_gets_help_not_an_analysis(bot: httpx.Client, fake: FakeSlack) -> None:
    channel = "C0HELPME01"
    post_event(
        bot,
        mention(channel, "1700000301.1", "<@UBOTLOGTR> hi"),
    )
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    assert "/triage" in posts(fake, channel)[0]["text"] and not blocks_of(posts(fake, channel)[0])


def test_slash_command_with_pasted_text_and_with_a_link(bot: httpx.Client, fake: FakeSlack) -> None:
    channel = "C0COMMAND1"
    form = {
        "command": "/triage",
        "text": training_log(ECC.format(ip="10.0.0.9"), steps=3),
        "channel_id": channel,
        "user_id": "U0CAROL01",
        "team_id": "T0TESTTEAM",
        "response_url": f"{fake.url}/respond/1",
        "trigger_id": "1.2.3",
    }
    r = post_form(bot, form)
    assert r.status_code == 200 and "Triaging" in r.text  # acknowledged at once, the work follows
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    first = posts(fake, channel)[0]
    assert "hardware.gpu_ecc_error" in json.dumps(blocks_of(first)) and first.get("thread_ts") is None
    aid = analysis_id_of(first)
    r = post_form(bot, {**form, "text": f"http://logtriage.test/analyses/{aid}"})
    assert r.status_code == 200
    fake.wait_for(lambda f: len(posts(f, channel)) == 2)
    assert analysis_id_of(posts(fake, channel)[1]) == aid  # the stored one, not a new analysis


def test_message_shortcut_triages_that_message(bot: httpx.Client, fake: FakeSlack) -> None:
    channel = "C0SHORTCUT"
    info = fake.add_file("F0SHORT001", "job.log", training_log(OOM.format(gib="4.00")).encode())
    payload = {
        "type": "message_action",
        "callback_id": "triage_message",
        "trigger_id": "1.2.4",
        "team": {"id": "T0TESTTEAM"},
        "user": {"id": "U0DAVE001"},
        "channel": {"id": channel},
        "response_url": f"{fake.url}/respond/2",
        "message_ts": "1700000400.000100",
        "message": {
            "type": "message",
            "ts": "1700000400.000100",
            "text": "",
            "files": [{"id": info["id"], "name": "job.log"}],
        },
    }
    r = post_form(bot, {"payload": json.dumps(payload)})
    assert r.status_code == 200
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    reply = posts(fake, channel)[0]
    assert reply["thread_ts"] == "1700000400.000100"
    assert "out of memory" in header(reply).lower()


def test_feedback_button_is_stored_and_updates_the_message(bot: httpx.Client, fake: FakeSlack) -> None:
    channel, ts = "C0FEEDBACK", "1700000500.000100"
    info = fake.add_file("F0FEED0001", "ecc.log", ECC_LOG)
    post_event(bot, file_share(channel, ts, [{"id": info["id"], "name": "ecc.log"}]))
    fake.wait_for(lambda f: len(posts(f, channel)) == 1 and answered(f, channel))
    reply = posts(fake, channel)[0]
    aid = analysis_id_of(reply)
    message_ts = "1700000999.000100"  # what Slack says the clicked message is; the stored ts is updated too
    payload = {
        "type": "block_actions",
        "trigger_id": "1.2.5",
        "team": {"id": "T0TESTTEAM"},
        "user": {"id": "U0ERIN001"},
        "channel": {"id": channel},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
        "response_url": f"{fake.url}/respond/3",
        "message": {"ts": message_ts, "text": ""},
        "actions": [
            {
                "type": "button",
                "action_id": "feedback_wrong",
                "block_id": f"analysis:{aid}",
                "value": aid,
                "action_ts": "1",
            }
        ],
    }
    opened = len(fake.of("views.open"))
    r = post_form(bot, {"payload": json.dumps(payload)})
    assert r.status_code == 200
    # "Wrong" asks for the right class first: a modal, nothing recorded yet
    fake.wait_for(lambda f: len(f.of("views.open")) > opened)
    view = fake.of("views.open")[-1].params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert (
        view["callback_id"] == "feedback_wrong_modal"
        and fake.of("views.open")[-1].params["trigger_id"] == "1.2.5"
    )
    options = [o["value"] for o in view["blocks"][1]["element"]["options"]]
    assert "host.oom_killed" in options and "unknown" not in options
    assert bot.get(f"{API}/{aid}").json()["feedback"] == []
    submission = {
        "type": "view_submission",
        "team": {"id": "T0TESTTEAM"},
        "user": {"id": "U0ERIN001"},
        "trigger_id": "1.2.6",
        "view": {
            "id": "V1",
            "type": "modal",
            "callback_id": "feedback_wrong_modal",
            "private_metadata": view["private_metadata"],
            "state": {
                "values": {
                    "correct_class": {
                        "value": {"type": "static_select", "selected_option": {"value": "host.oom_killed"}}
                    },
                    "comment": {
                        "value": {"type": "plain_text_input", "value": "the node ran out of RAM first"}
                    },
                }
            },
        },
    }
    r = post_form(bot, {"payload": json.dumps(submission)})
    assert r.status_code == 200
    fake.wait_for(lambda f: len(posts(f, channel, method="chat.update")) >= 2)
    updates = posts(fake, channel, method="chat.update")
    assert message_ts in {u["ts"] for u in updates}
    text = json.dumps(blocks_of(updates[-1]))
    assert (
        "marked wrong by <@U0ERIN001> (it was host.oom_killed)" in text
        and "feedback: 0 correct, 1 wrong" in text
    )
    fb = bot.get(f"{API}/{aid}").json()["feedback"]
    assert [(f["verdict"], f["correct_class"], f["comment"]) for f in fb] == [
        ("wrong", "host.oom_killed", "the node ran out of RAM first")
    ]


@pytest.mark.parametrize("status", [429, 503])
def test_rate_limited_or_failed_post_is_retried(bot: httpx.Client, fake: FakeSlack, status: int) -> None:
    channel = f"C0RETRY{status}X"
    before = len(fake.of("chat.postMessage"))
    fake.fail("chat.postMessage", status=status, retry_after=0)
    post_event(
        bot,
        mention(channel, "1700000600.1", "<@UBOTLOGTR>\n```" + training_log(NCCL_TIMEOUT, steps=3) + "```"),
    )
    # the refused post and its retry are both recorded; the answer then completes (check mark)
    fake.wait_for(
        lambda f: (
            len(posts(f, channel)) == 2
            and any(p.get("name") == "white_check_mark" for p in posts(f, channel, method="reactions.add"))
        )
    )
    calls = fake.of("chat.postMessage")[before:]
    assert [c.params.get("channel") for c in calls].count(channel) == 2


def test_binary_and_huge_files_are_answered_with_a_clear_message(
    bot_server: LiveServer, bot: httpx.Client, fake: FakeSlack
) -> None:
    channel = "C0BADFILES"
    big = fake.add_file("F0HUGE0001", "huge.log", b"x", size=bot_server.settings.slack_max_file_bytes + 1)
    binary = fake.add_file(
        "F0BIN00001", "weights.log", bytes(range(256)) * 400, mimetype="application/octet-stream"
    )
    post_event(
        bot,
        mention(
            channel,
            "1700000700.1",
            "<@UBOTLOGTR>",
            user="U0FRAN001",
            files=[{"id": big["id"], "name": "huge.log"}],
        ),
    )
    post_event(
        bot,
        mention(
            channel,
            "1700000701.1",
            "<@UBOTLOGTR>",
            user="U0FRAN001",
            files=[{"id": binary["id"], "name": "weights.log"}],
        ),
    )
    fake.wait_for(lambda f: len(posts(f, channel, method="chat.postEphemeral")) == 2)
    texts = sorted(p["text"] for p in posts(fake, channel, method="chat.postEphemeral"))
    assert any("MiB limit" in t for t in texts), texts
    assert any("binary" in t.lower() or "not text" in t.lower() for t in texts), texts
    assert not posts(fake, channel)  # no diagnosis posted for either
    assert ("F0HUGE0001", f"Bearer {BOT_TOKEN}") not in fake.downloads  # refused before downloading


def test_archives_shared_in_slack_are_refused_by_name(
    bot_server: LiveServer, bot: httpx.Client, fake: FakeSlack
) -> None:
    from tests.hostile.corpus import TAR_OF_LOGS, ZIP_OF_ZEROS

    channel = "C0ARCHIVES"
    before = analyses_count(bot_server)
    shared = [
        fake.add_file("F0ZIP00001", "logs.zip", ZIP_OF_ZEROS, mimetype="application/zip"),
        fake.add_file("F0TGZ00001", "logs.tar.gz", gzip.compress(TAR_OF_LOGS), mimetype="application/gzip"),
    ]
    for i, info in enumerate(shared):
        post_event(
            bot,
            mention(
                channel,
                f"1700000750.{i + 1}",
                "<@UBOTLOGTR>",
                user="U0ARCH001",
                files=[{"id": info["id"], "name": info["name"]}],
            ),
        )
    fake.wait_for(lambda f: len(posts(f, channel, method="chat.postEphemeral")) == 2)
    texts = sorted(p["text"] for p in posts(fake, channel, method="chat.postEphemeral"))
    assert "logs.tar.gz: a tar archive" in texts[0] and "logs.zip: a zip archive" in texts[1], texts
    assert all("send the log files themselves" in t for t in texts), texts
    assert not posts(fake, channel)  # no diagnosis
    assert analyses_count(bot_server) == before  # nothing stored


def test_planted_secrets_never_reach_slack(bot: httpx.Client, fake: FakeSlack) -> None:
    channel, ts = "C0SECRETS1", "1700000800.000100"
    secrets = [
        "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
        "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
    ]
    log = (
        (
            f"export HF_TOKEN={secrets[0]}\nAWS_ACCESS_KEY_ID={secrets[1]}\n"
            f"git clone https://x:{secrets[2]}@github.com/org/repo\nOPENAI_API_KEY={secrets[3]}\n"
        ).encode()
        + ECC_LOG
        + f"\nretrying with token {secrets[0]}\n".encode()
    )
    info = fake.add_file("F0SECRET01", f"rank0-{secrets[1]}.log", log)
    post_event(bot, file_share(channel, ts, [{"id": info["id"], "name": info["name"]}]))
    post_event(
        bot,
        mention(
            channel,
            "1700000801.1",
            f"<@UBOTLOGTR>\n```token={secrets[3]}\n{ECC.format(ip='10.1.1.1')}```",
            user="U0GINA001",
        ),
    )
    fake.wait_for(lambda f: len(posts(f, channel)) == 2)
    sent = "\n".join(c.raw for c in fake.calls if c.method != "files.info")
    for s in secrets:
        assert s not in sent


def test_hook_notification_twice_posts_once_and_threads_the_repeat(
    bot: httpx.Client, fake: FakeSlack
) -> None:
    channel = "C0NOTIFY01"
    ids = []
    for job in ("train-7", "train-8"):
        body = f"job {job} starting\n".encode() + ECC_LOG
        r = bot.post(
            API,
            content=body,
            params={"job_id": job, "notify": channel, "host": "node-17"},
            headers={"Content-Type": "text/plain"},
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
        n = len(ids)
        fake.wait_for(lambda f: len(posts(f, channel)) == n)  # noqa: B023
    top, again = posts(fake, channel)
    assert top.get("thread_ts") is None and analysis_id_of(top) == ids[0]
    assert again["thread_ts"] and "Again on job train-8" in again["text"] and ids[1] in again["text"]


def test_a_hooks_host_never_steers_the_link_posted_to_slack(
    db_url: str, fake: FakeSlack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """No LOGTRIAGE_PUBLIC_URL, tokens: a hook sent with `Host: evil.example` is served, and the
    notice in Slack links to the configured address, not to the Host."""
    from app.db import repo
    from app.db.session import Database

    url = f"sqlite:///{tmp_path / 'own.db'}" if db_url.startswith("sqlite") else None
    if url is None:
        url = request.getfixturevalue("pg_schemas").new()
    settings = make_settings(
        tmp_path,
        url,
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_api_url=fake.api_url,
        auth_cache_seconds=0,
        port=free_port(),
    )
    with live_server(settings, port=settings.port) as srv, srv.client() as c:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                _row, secret = repo.create_token(s, name="hooks", scopes=["ingest"])
        finally:
            db.dispose()
        channel = "C0HOSTLINK"
        r = c.post(
            API,
            content=ECC_LOG,
            params={"notify": channel, "job_id": "steer-1"},
            headers={
                "Content-Type": "text/plain",
                "Authorization": f"Bearer {secret}",
                "Host": "evil.example",
            },
        )
        assert r.status_code == 201, r.text
        assert r.headers["location"] == f"/api/v1/analyses/{r.json()['id']}"
        fake.wait_for(lambda f: len(posts(f, channel)) == 1)
        sent = json.dumps(posts(fake, channel)[0])
        assert "evil.example" not in sent
        assert f"http://127.0.0.1:{settings.port}/analyses/{r.json()['id']}" in sent


def test_hook_answered_before_its_analysis_is_done_still_notifies(bot: httpx.Client, fake: FakeSlack) -> None:
    channel = "C0NOTIFY03"
    r = bot.post(
        API,
        content=ECC_LOG,
        params={"job_id": "async-1", "notify": channel},
        headers={"Content-Type": "text/plain", "Prefer": "respond-async"},
    )
    assert r.status_code == 202, r.text  # answered at once; the post waits for the analysis
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    assert analysis_id_of(posts(fake, channel)[0]) == r.json()["id"]
    assert "hardware.gpu_ecc_error" in json.dumps(blocks_of(posts(fake, channel)[0]))


def test_notify_needs_a_channel_id_and_a_configured_bot(bot: httpx.Client, client: httpx.Client) -> None:
    r = bot.post(
        API, content=ECC_LOG, params={"notify": "#training failures"}, headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 422 and "channel" in r.json()["detail"]
    r = client.post(
        API, content=ECC_LOG, params={"notify": "C0NOTIFY02"}, headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 422 and "LOGTRIAGE_SLACK_BOT_TOKEN" in r.json()["detail"]


# --- Socket Mode -----------------------------------------------------------------------------------


def test_socket_mode_receives_events_over_the_socket(db_url: str, fake: FakeSlack, tmp_path: Path) -> None:
    channel, ts = "C0SOCKET01", "1700000900.000100"
    settings = make_settings(
        tmp_path,
        None if db_url.startswith("sqlite") else db_url,
        slack_bot_token=BOT_TOKEN,
        slack_app_token=APP_TOKEN,
        slack_api_url=fake.api_url,
    )
    with live_server(settings) as srv, srv.client() as c:
        assert c.post("/slack/events", content="{}").status_code == 404  # no signing secret: no HTTP route
        fake.wait_for(lambda f: len(f.of("apps.connections.open")) >= 1)
        fake.wait_for(lambda f: bool(f._sockets))
        info = fake.add_file("F0SOCK0001", "ecc.log", ECC_LOG)
        envelope = fake.push(file_share(channel, ts, [{"id": info["id"], "name": "ecc.log"}]))
        fake.wait_for(lambda f: any(a.get("envelope_id") == envelope for a in f.socket_acks))
        fake.wait_for(lambda f: len(posts(f, channel)) == 1 and answered(f, channel))
    assert posts(fake, channel)[0]["thread_ts"] == ts
    assert re.search(r"hardware\.gpu_ecc_error", json.dumps(blocks_of(posts(fake, channel)[0])))


def test_a_delivery_is_claimed_once_under_concurrency(db_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from app.db import repo
    from app.db.migrate import upgrade
    from app.db.session import Database

    db = Database(db_url)
    try:
        upgrade(db.engine)

        def claim(_: int) -> bool:
            with db.write() as s:
                return repo.claim_slack_event(s, key="event:Ev-concurrent")

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(claim, range(16)))
        assert results.count(True) == 1 and results.count(False) == 15
    finally:
        db.dispose()


def test_submit_notify_posts_and_falls_back_without_a_bot(
    bot_server: LiveServer, server: LiveServer, fake: FakeSlack, tmp_path: Path
) -> None:
    from tests.servicekit import cli_env, run_cli

    log = tmp_path / "rank0.log"
    log.write_bytes(ECC_LOG)
    channel = "C0SUBMIT01"
    env = cli_env(bot_server.settings)
    r = run_cli(
        "submit",
        str(log),
        "--url",
        bot_server.url,
        "--job-id",
        "sub-1",
        "--notify",
        channel,
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    aid = json.loads(r.stdout)["id"]
    fake.wait_for(lambda f: len(posts(f, channel)) == 1)
    assert analysis_id_of(posts(fake, channel)[0]) == aid
    # a service without the bot: the log is still analysed and stored, the user told why no post
    r = run_cli(
        "submit", str(log), "--url", server.url, "--notify", channel, "--json", env=cli_env(server.settings)
    )
    assert r.returncode == 0 and "submitting without --notify" in r.stderr
    assert json.loads(r.stdout)["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"


def test_a_retriage_that_changes_the_result_updates_the_message(
    db_url: str, fake: FakeSlack, tmp_path: Path
) -> None:
    import shutil

    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    for name in ("gpu-xid-ecc", "nvidia-smi-uncorrectable-ecc", "cuda-uncorrectable-ecc"):
        (rules / "hardware" / f"{name}.yaml").unlink()  # a library from before the ECC rules
    url = db_url if not db_url.startswith("sqlite") else f"sqlite:///{tmp_path / 'r.db'}"
    channel, ts = "C0RETRIAGE", "1700001000.000100"
    info = fake.add_file("F0RETRI001", "ecc.log", ECC_LOG)
    with live_server(slack_settings(tmp_path / "d", url, fake, rules_dir=rules)) as old, old.client() as c:
        post_event(c, file_share(channel, ts, [{"id": info["id"], "name": "ecc.log"}]))
        fake.wait_for(lambda f: len(posts(f, channel)) == 1 and answered(f, channel))
    first = posts(fake, channel)[0]
    assert "hardware.gpu_ecc_error" not in json.dumps(blocks_of(first))
    aid = analysis_id_of(first)
    with live_server(slack_settings(tmp_path / "d", url, fake)) as new, new.client() as c:
        r = c.post(f"{API}/{aid}/retriage")
        assert r.status_code == 200 and r.json()["changes"], r.text
        fake.wait_for(lambda f: len(posts(f, channel, method="chat.update")) == 1)
    update = posts(fake, channel, method="chat.update")[0]
    assert "hardware.gpu_ecc_error" in json.dumps(blocks_of(update))
    assert "updated after a re-triage" in json.dumps(blocks_of(update))
    assert len(posts(fake, channel)) == 1  # updated in place, nothing new posted


def test_a_host_crossing_the_exclusion_threshold_is_told_once(
    db_url: str, fake: FakeSlack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'hosts.db'}" if db_url.startswith("sqlite") else None
    if url is None:
        url = request.getfixturevalue("pg_schemas").new()
    channel = "C0HOSTS001"
    settings = slack_settings(tmp_path, url, fake, slack_hosts_channel=channel)
    host = "10.66.0.7"
    ecc = ECC_LOG.replace(b"10.12.0.33", host.encode())
    with live_server(settings) as srv, srv.client() as c:
        for n, job in enumerate(("lemon-1", "lemon-2", "lemon-3"), start=1):
            r = c.post(
                API,
                content=f"job {job}\n".encode() + ecc,
                params={"job_id": job},
                headers={"Content-Type": "text/plain"},
            )
            assert r.status_code == 201, r.text
            if n == 2:  # the second job makes it a lemon: one notice
                fake.wait_for(lambda f: len(posts(f, channel)) == 1)
                second = r.json()["id"]
        # the third job adds to a host already listed: nothing new is said (the notice of the
        # second is the only one once the third's analysis is stored and answered)
        assert c.get(f"/api/v1/analyses/{r.json()['id']}").json()["suspect_hosts"][0]["jobs"] == 3
    sent = posts(fake, channel)
    assert len(sent) == 1
    text = sent[0]["text"]
    assert f"*{host}*: hardware failures in 2 jobs" in text and f"--exclude={host}" in text
    assert f"/analyses/{second}" in text and "hardware.gpu_ecc_error" in text
