"""Signed browser sessions and CSRF tokens (stdlib HMAC; no server-side session store).

Every browser gets a session cookie: anonymous (a random nonce) until someone signs in with an
API token, then also the token's hash, so a revoked token ends its web sessions as fast as its
API use (the same token cache answers both). The cookie is HttpOnly and SameSite=Lax; forms and
the page's own API calls carry a CSRF token derived from the nonce, checked on every unsafe
request that a cookie authenticates.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.settings import Settings

COOKIE = "lt_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
KEY_FILE = "session.key"


def load_secret(settings: Settings) -> bytes:
    """The signing key: the setting, else one kept in the data dir (created once, mode 0600,
    shared by every worker process of this host)."""
    if settings.session_secret is not None and settings.session_secret.get_secret_value():
        return settings.session_secret.get_secret_value().encode()
    path = Path(settings.data_dir) / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    key = secrets.token_hex(32)
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    try:
        os.link(tmp, path)  # first writer wins; a racing worker reads the winner's key
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return bytes.fromhex(path.read_text().strip())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class BrowserSession:
    nonce: str
    token_hash: str | None = None  # signed in with this API token
    token_name: str | None = None
    expires: float = 0.0
    new: bool = False  # not yet sent to the browser

    @property
    def signed_in(self) -> bool:
        return self.token_hash is not None


class SessionCodec:
    def __init__(self, secret: bytes, *, hours: float, secure: bool) -> None:
        self._key = hashlib.sha256(b"logtriage-session\0" + secret).digest()
        self._csrf_key = hashlib.sha256(b"logtriage-csrf\0" + secret).digest()
        self.max_age = int(hours * 3600)
        self.secure = secure

    def dumps(self, session: BrowserSession) -> str:
        body = json.dumps(
            {"n": session.nonce, "t": session.token_hash, "u": session.token_name, "e": int(session.expires)},
            separators=(",", ":"),
        ).encode()
        sig = hmac.new(self._key, body, hashlib.sha256).digest()
        return f"{_b64(body)}.{_b64(sig)}"

    def loads(self, value: str | None, *, now: float | None = None) -> BrowserSession | None:
        """The session a cookie holds, or None when it is missing, forged or expired."""
        if not value or value.count(".") != 1 or len(value) > 4096:
            return None
        body_b64, sig_b64 = value.split(".")
        try:
            body, sig = _unb64(body_b64), _unb64(sig_b64)
        except ValueError:
            return None
        if not hmac.compare_digest(sig, hmac.new(self._key, body, hashlib.sha256).digest()):
            return None
        try:
            data: dict[str, Any] = json.loads(body)
        except ValueError:
            return None
        expires = float(data.get("e") or 0)
        if expires <= (now or time.time()):
            return None
        nonce = data.get("n")
        if not isinstance(nonce, str) or not nonce:
            return None
        token_hash = data.get("t") if isinstance(data.get("t"), str) else None
        name = data.get("u") if isinstance(data.get("u"), str) else None
        return BrowserSession(nonce=nonce, token_hash=token_hash, token_name=name, expires=expires)

    def anonymous(self) -> BrowserSession:
        return BrowserSession(nonce=secrets.token_urlsafe(18), expires=time.time() + self.max_age, new=True)

    def signed_in(self, *, token_hash: str, token_name: str, token_expires: float | None) -> BrowserSession:
        """A fresh session (a new nonce: no CSRF token of the anonymous one carries over)."""
        expires = time.time() + self.max_age
        if token_expires is not None:
            expires = min(expires, token_expires)
        return BrowserSession(
            nonce=secrets.token_urlsafe(18),
            token_hash=token_hash,
            token_name=token_name,
            expires=expires,
            new=True,
        )

    def csrf_token(self, session: BrowserSession) -> str:
        return _b64(hmac.new(self._csrf_key, session.nonce.encode(), hashlib.sha256).digest())

    def csrf_ok(self, session: BrowserSession | None, token: str | None) -> bool:
        if session is None or not token:
            return False
        return hmac.compare_digest(self.csrf_token(session), token)

    def cookie_args(self, session: BrowserSession) -> dict[str, Any]:
        return {
            "key": COOKIE,
            "value": self.dumps(session),
            "max_age": max(0, int(session.expires - time.time())),
            "httponly": True,
            "samesite": "lax",
            "secure": self.secure,
            "path": "/",
        }
