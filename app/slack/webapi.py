"""The Slack Web API client every bot call goes through, and the file download.

Every call, `auth.test` included, goes to `LOGTRIAGE_SLACK_API_URL`, so tests (and air-gapped
sites with a relay) point the whole bot at one place. Rate limits (`429` + `Retry-After`), 500/503
and dropped connections are retried by slack_sdk's own handlers, with backoff.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from app.errors import InputError, InputTooLargeError, SlackError, UnsupportedMediaError

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from app.settings import Settings

# where Slack serves `url_private` files (workspace, Enterprise Grid and education hosts)
SLACK_FILE_HOSTS = frozenset({"files.slack.com", "files-origin.slack.com", "files-edu.slack.com"})
DEFAULT_API_URL = "https://slack.com/api/"
RATE_LIMIT_RETRIES = 4
SERVER_ERROR_RETRIES = 2
DOWNLOAD_TIMEOUT = 120.0
# not logs: refused from the file's own metadata, before a byte is downloaded
NOT_LOG_MIME = ("image/", "video/", "audio/", "application/pdf", "application/vnd.")


def make_client(settings: Settings) -> AsyncWebClient:
    from slack_sdk.http_retry.builtin_async_handlers import (
        AsyncConnectionErrorRetryHandler,
        AsyncRateLimitErrorRetryHandler,
        AsyncServerErrorRetryHandler,
    )
    from slack_sdk.web.async_client import AsyncWebClient

    assert settings.slack_bot_token is not None
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES),
            AsyncServerErrorRetryHandler(max_retry_count=SERVER_ERROR_RETRIES),
        ],
    )


def allowed_file_url(url: str, settings: Settings) -> bool:
    """Slack's file hosts over https; or, when the API URL is set to something else (a test
    fake, a relay), that URL's own host and scheme. The bot token goes nowhere else."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname in SLACK_FILE_HOSTS:
        return True
    if settings.slack_api_url.rstrip("/") != DEFAULT_API_URL.rstrip("/"):
        api = urlsplit(settings.slack_api_url)
        return (parts.scheme, parts.hostname, parts.port) == (api.scheme, api.hostname, api.port)
    return False


def check_file(file: dict[str, Any], *, max_bytes: int) -> None:
    """Refuse what cannot be a log from Slack's own description of the file."""
    name = str(file.get("name") or file.get("id") or "file")
    mime = str(file.get("mimetype") or "")
    if file.get("mode") in ("external", "tombstone") or file.get("is_external"):
        raise InputError(
            f"{name}: the file is not stored in Slack (external or deleted); upload the log itself"
        )
    if mime.startswith(NOT_LOG_MIME):
        raise UnsupportedMediaError(f"{name}: a {mime} file is not a log; share the job's log or traceback")
    size = int(file.get("size") or 0)
    if size > max_bytes:
        raise InputTooLargeError(
            f"{name}: {size / 2**20:.0f} MiB is over the bot's {max_bytes / 2**20:.0f} MiB limit; "
            "gzip it, share the failing part, or upload it with `logtriage submit`"
        )


async def download(url: str, *, settings: Settings, dest: Path, max_bytes: int) -> int:
    """Stream a `url_private` file into `dest` with the bot token; stop past `max_bytes`."""
    import httpx

    if not allowed_file_url(url, settings):
        raise InputError("the file's download address is not a Slack file host; not fetched")
    assert settings.slack_bot_token is not None
    headers = {"Authorization": f"Bearer {settings.slack_bot_token.get_secret_value()}"}
    written = 0
    # redirects are not followed: the token must not travel to wherever one points
    async with (
        httpx.AsyncClient(timeout=DOWNLOAD_TIMEOUT, follow_redirects=False) as http,
        http.stream("GET", url, headers=headers) as r,
    ):
        if r.status_code != 200:
            raise SlackError(f"Slack answered {r.status_code} to the file download")
        if "text/html" in r.headers.get("content-type", ""):
            # what Slack serves instead of the file when the token lacks `files:read`
            raise SlackError("Slack served a sign-in page instead of the file: the bot needs `files:read`")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("wb") as out:
            async for chunk in r.aiter_bytes(1 << 20):
                written += len(chunk)
                if written > max_bytes:
                    raise InputTooLargeError(f"the file is over the bot's {max_bytes / 2**20:.0f} MiB limit")
                out.write(chunk)
    return written
