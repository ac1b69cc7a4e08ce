"""What `/slack/events` checks before Bolt sees a request: its signature, then its shape.

Bolt parses a body before its listeners run and raised on what Slack never sends (a JSON
array, `payload=` that is not a JSON object, a timestamp that is not a number): each was a 500.
Here the signature comes first, over the raw bytes and in constant time, so a sender without
the signing secret learns nothing about its body but a 401; a signed body that is not one of
Slack's request shapes is a 400. Bolt still verifies the signature again on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from app.errors import AuthError, InputError

REPLAY_WINDOW_S = 300  # Slack's own: a signature more than 5 minutes old is refused
BAD_SIGNATURE = "Slack request signature missing, invalid or older than 5 minutes"
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS = 100
# fields of a request or an interaction's payload that Bolt and the listeners read as objects /
# lists of objects (an event's `user` and `channel` are ids: only its `files` are checked)
OBJECT_FIELDS = ("event", "user", "channel", "team", "container", "message", "view", "enterprise")
LIST_FIELDS = ("actions", "files", "authorizations")


def check_signature(
    headers: Mapping[str, str], body: bytes, *, secret: str, now: float | None = None
) -> None:
    """Raise 401 unless `body` carries a valid `v0` signature made with `secret` within 5 minutes."""
    ts = headers.get("x-slack-request-timestamp", "")
    sig = headers.get("x-slack-signature", "")
    if not ts or not sig or not (ts.isascii() and ts.isdigit()) or len(ts) > 12:
        raise AuthError(BAD_SIGNATURE)
    if abs((time.time() if now is None else now) - int(ts)) > REPLAY_WINDOW_S:
        raise AuthError(BAD_SIGNATURE)
    expected = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(("v0=" + expected).encode(), sig.encode("latin-1", "replace")):
        raise AuthError(BAD_SIGNATURE)


def _malformed(what: str) -> InputError:
    return InputError(f"not a Slack request: {what}")


def _check_object(obj: Any, what: str, *, fields: bool = True) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _malformed(f"{what} is not a JSON object")
    if not isinstance(obj.get("type"), str) or not obj["type"]:
        raise _malformed(f"{what} has no `type`")
    if not fields:
        return obj
    for name in OBJECT_FIELDS:
        if name in obj and obj[name] is not None and not isinstance(obj[name], dict):
            raise _malformed(f"`{name}` of {what} is not an object")
    for name in LIST_FIELDS:
        value = obj.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
            raise _malformed(f"`{name}` of {what} is not a list of objects")
    return obj


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise _malformed(f"{what} is not JSON") from None


def check_shape(content_type: str, body: bytes) -> None:
    """Raise 400 unless `body` is one of Slack's request shapes: an Events API JSON object, an
    interaction (`payload=` one JSON object), a slash command or an SSL check (forms)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (JSON_TYPE, FORM_TYPE):
        raise _malformed(f"Content-Type {media or '(none)'!r}; Slack sends {JSON_TYPE} or {FORM_TYPE}")
    if not body:
        raise _malformed("empty body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("the body is not UTF-8") from None
    if "\x00" in text:
        raise _malformed("NUL in the body")
    if media == JSON_TYPE:
        obj = _check_object(_json(text, "the body"), "the body")
        if obj["type"] == "event_callback":
            if not isinstance(obj.get("event"), dict):
                raise _malformed("an event_callback without its `event` object")
            event = _check_object(obj["event"], "the event", fields=False)  # its user is an id
            files = event.get("files")
            if files is not None and not (
                isinstance(files, list) and all(isinstance(f, dict) for f in files)
            ):
                raise _malformed("`files` of the event is not a list of objects")
        return
    try:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise _malformed("the body is not a form") from None
    if any(len(v) != 1 for v in fields.values()):
        raise _malformed("a form field is given twice")
    if "payload" in fields:
        _check_object(_json(fields["payload"][0], "`payload`"), "`payload`")
    elif not fields.get("command", [""])[0].startswith("/") and fields.get("ssl_check") != ["1"]:
        raise _malformed("a form that is neither an interaction (`payload`) nor a slash command")
