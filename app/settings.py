"""Settings from the environment (``LOGTRIAGE_*``), built by a factory, never at import time.

The settings table in ``docs/service.md`` is generated from this class (``python -m app.settings``)
and a test checks that the two agree, so the docs cannot drift.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "LOGTRIAGE_"


class Settings(BaseSettings):
    """Every setting, its default and meaning."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    data_dir: Path = Field(default=Path("./data"), description="Database file (SQLite) and stored log blobs.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test. "
        "Default: SQLite file in the data dir.",
    )
    db_connect_timeout: float = Field(
        default=3.0,
        ge=1,
        le=600,
        description="Seconds to wait for a PostgreSQL connection (whole seconds, at least 2, for "
        "libpq). A database that does not answer in time makes requests answer 503 with "
        "Retry-After; connecting is not retried for a second after a failure.",
    )
    db_statement_timeout: float = Field(
        default=15.0,
        ge=0,
        le=86400,
        description="`logtriage serve`: seconds one PostgreSQL statement (or commit) of a request, an "
        "upload's write or a readiness check may take: the server's `statement_timeout`, and a "
        "client-side deadline 2 s later for a server that stopped answering altogether (its "
        "connection is closed, the request answers 503). Migrations and the CLI's `db gc`, "
        "`retriage` and `doctor` have no such limit (0 = no limit).",
    )
    db_pool_timeout: float = Field(
        default=3.0,
        gt=0,
        le=600,
        description="`logtriage serve`: seconds a request waits for a free pooled database "
        "connection before answering 503 (the pool holds 20 per server process).",
    )
    rules_dir: Path | None = Field(
        default=None, description="Rule library directory (default: the bundled rules/)."
    )
    cache_dir: Path | None = Field(
        default=None, description="Compiled-rule cache (default: $XDG_CACHE_HOME/logtriage)."
    )
    rule_packs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Site rule packs kept as YAML directories (`:`-separated paths): rule files as in "
        "rules/<group>/ and an optional classes.yaml; added to the bundled rules and the published ones.",
    )

    @field_validator("rule_packs", mode="before")
    @classmethod
    def _split_packs(cls, value: Any) -> Any:
        # a path list, as PATH is written: "/srv/packs/a:/srv/packs/b"
        if isinstance(value, str):
            return [p for p in value.split(":") if p.strip()]
        return value

    engine: str = Field(
        default="auto", description="Scan engine: auto, hyperscan or regex (portable fallback)."
    )
    max_bytes: int = Field(
        default=20 << 30, description="Largest log accepted, in bytes after decompression (0 = no limit)."
    )
    scan_jobs: int = Field(default=0, description="Processes per scan (0 = one per core for large files).")
    blob_url: str | None = Field(
        default=None,
        pattern=r"^s3://[^/?#]+(/[^?#]*)?$",
        description="Where stored logs go: unset = `blobs/` in the data dir; `s3://bucket/prefix` = an "
        "S3-compatible bucket (extra `logtriage[s3]`; credentials from the standard `AWS_*` variables).",
    )
    s3_endpoint_url: str | None = Field(
        default=None,
        description="S3 API endpoint for S3-compatible stores, e.g. http://127.0.0.1:9000 (MinIO) "
        "(default: AWS S3).",
    )
    s3_region: str | None = Field(
        default=None, description="S3 region (default: `AWS_REGION` or `AWS_DEFAULT_REGION`, else us-east-1)."
    )

    # --- service ------------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="`logtriage serve`: interface to bind.")
    port: int = Field(default=8000, ge=0, le=65535, description="`logtriage serve`: TCP port.")
    workers: int = Field(default=1, ge=1, description="`logtriage serve`: uvicorn worker processes.")
    health_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="`logtriage serve`: also answer `GET /healthz` on this port, from the supervisor "
        "process, never queued behind uploads (point a liveness probe here). 503 when a worker's event "
        "loop has been silent for `health_stall_s`. Unset: `/healthz` only on the service port.",
    )
    health_stall_s: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="`--health-port`: a warm worker whose event loop has not turned for this long makes "
        "`/healthz` there a 503 (it beats every 0.5 s; an analysis never runs on it).",
    )
    worker_recycle_growth: float = Field(
        default=0.08,
        ge=0,
        le=10,
        description="`serve --workers N` (N >= 2): a web worker whose memory (RSS) stays more than this "
        "fraction above its size once warm, for `worker_recycle_after_s`, is replaced: a new worker takes "
        "over its listening socket, then the old one finishes its requests and analyses and exits "
        "(0 = never).",
    )
    worker_recycle_after_s: float = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="How long a worker must stay above `worker_recycle_growth` before it is replaced "
        "(the allocator trims every 10 s: a short peak is given back without a restart).",
    )
    analysis_workers: int = Field(
        default=2,
        ge=1,
        description="Scan processes per server process (analyses run concurrently, off the event loop).",
    )
    analysis_backlog: int = Field(
        default=512,
        ge=0,
        description="Uploads one server process keeps waiting for a free scan worker (answered 202 "
        "at once, analysed in turn, round-robin between clients); past it, 503 with Retry-After.",
    )
    analysis_backlog_bytes: int = Field(
        default=256 << 20,
        ge=0,
        description="Memory the waiting uploads held in memory (bodies up to 1 MiB) may take in one "
        "server process; past it, the next ones wait written to the spool on disk (larger bodies "
        "always do), so only the count (`analysis_backlog`) refuses (0 = no limit).",
    )
    client_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of the backlog one client (API token, or address without one) may hold; "
        "past it that client gets 429 with Retry-After while others are still admitted.",
    )
    bulk_bytes: int = Field(
        default=32 << 20,
        ge=0,
        description="Uploads of at least this many bytes (as sent) are analysed by a low-priority "
        "(nice 19) scan process, so one huge log does not slow the small ones (0 = no bulk lane).",
    )
    max_upload_bytes: int = Field(
        default=4 << 30,
        ge=0,
        description="Largest request body in bytes, as sent (compressed); larger uploads get 413 "
        "(0 = no limit).",
    )
    max_expansion_ratio: float = Field(
        default=200.0,
        ge=0,
        description="A compressed upload may expand to at most this many times the compressed bytes "
        "read so far (checked while it streams, once past 8 MiB; 0 = no check): a compression bomb "
        "gets 413 within its first MiBs, having written nothing. Logs gzip 5-50 times.",
    )
    max_tmp_bytes: int = Field(
        default=8 << 30,
        ge=0,
        description="Temporary disk one upload may take in the data dir: its body as sent plus its "
        "staged (compressed, redacted) copy; beyond it, 413 (0 = no limit). Nothing else is written: "
        "uploads are decompressed, redacted and scanned in one pass.",
    )
    body_timeout: float = Field(
        default=60.0,
        ge=0,
        description="Seconds an upload's body may send nothing before the request is answered 408 "
        "(a stalled or trickling client does not hold a spool file and a connection; 0 = wait forever).",
    )
    min_body_rate: int = Field(
        default=1024,
        ge=0,
        description="Bytes per second an upload's body must average over each `body_rate_window` "
        "(from one window after its start); slower, the request is answered 408 and its spool "
        "removed: a body trickled a byte at a time does not hold a connection for hours "
        "(0 = no minimum).",
    )
    body_rate_window: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds over which `min_body_rate` is averaged; also the grace at the start of a "
        "body. A byte every 10 s is cut about one window after the body starts.",
    )
    header_timeout: float = Field(
        default=10.0,
        ge=0,
        description="Seconds a connection has to send its whole request head (request line and "
        "headers), counted from the connection for its first request and from the first byte of each "
        "later one; past it the connection is closed, with a 408 if part of a head came "
        "(0 = no limit). An idle kept-alive connection is closed after uvicorn's keep-alive timeout (5 s).",
    )
    max_connections_per_client: int = Field(
        default=64,
        ge=0,
        description="Open connections one client address may hold per server process; one more gets "
        "429 + Retry-After at once and is closed. With `--workers N` each process counts its own "
        "(a client may hold up to N times this). Behind a reverse proxy every connection comes from "
        "the proxy: raise it above what the proxy opens, or 0 (no limit).",
    )
    max_connections: int = Field(
        default=1024,
        ge=0,
        description="Open connections per server process; one more gets 503 + Retry-After at once "
        "and is closed (0 = no limit). Keep it under the process's open-file limit (`ulimit -n`).",
    )
    auth_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a server process reuses what it read about API tokens: a revoked token "
        "keeps working for at most this long, and open mode ends this long after the first token "
        "is created (0 = read the token table on every request).",
    )
    sync_wait: float = Field(
        default=10.0,
        ge=0,
        description="Seconds `POST /api/v1/analyses` waits for the result before answering 202 + Location.",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#@\s]+(/[^?#\s]*)?$",
        description="Base URL of every absolute link: `Location`, the links in API resources and "
        "pages, the report links in Slack messages, e.g. https://logtriage.example.com. Unset: built "
        "from the request only when its Host is a loopback name or listed in "
        "`LOGTRIAGE_ALLOWED_HOSTS`, else relative (`/api/v1/...`; Slack: "
        "http://LOGTRIAGE_HOST:LOGTRIAGE_PORT). Its host is allowed as a Host.",
    )
    allowed_hosts: str | None = Field(
        default=None,
        description="Host names the service answers to, comma-separated: `logtriage.example.com`, "
        "`.example.com` (every name under it), `*` (any, with tokens only). Loopback names "
        "(127.0.0.1, localhost, [::1]) always are. Set (or `LOGTRIAGE_PUBLIC_URL` set), any other "
        "Host gets 400. Unset: open mode (no token) answers loopback names only (DNS rebinding), "
        "with tokens any Host is served but links are not built from it.",
    )
    require_tokens: bool = Field(
        default=False,
        description="Refuse requests without a token even while no token exists (no open loopback mode; "
        "set it behind a reverse proxy).",
    )
    auto_migrate: bool = Field(
        default=True, description="Upgrade the database schema when the service starts."
    )
    recurrence_days: int = Field(
        default=7, ge=1, description="Window for 'seen N times in D days' and for suspect hosts."
    )
    suspect_min_jobs: int = Field(
        default=2,
        ge=1,
        description="A host is a suspect node when hardware-class failures hit it in this many jobs "
        "within the recurrence window.",
    )
    backtest_ray_address: str | None = Field(
        default=None,
        description="Back-test rule drafts on Ray at this address (`auto`, `local`, `ray://HOST:10001` "
        "or `HOST:PORT`, as `retriage --ray-address`) once the history holds "
        "`backtest_ray_min_lines` signal lines: the lines are split by analysis id ranges over Ray "
        "tasks, each reading its share from the database (same result as in process). Every node "
        "needs logtriage and the database (PostgreSQL; a password from its own PGPASSWORD or "
        "~/.pgpass). Unset: always in process.",
    )
    backtest_ray_min_lines: int = Field(
        default=100_000,
        ge=0,
        description="`backtest_ray_address`: a history with fewer signal lines is back-tested in process.",
    )
    backtest_ray_shards: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="`backtest_ray_address`: Ray tasks per back-test (0 = the cluster's CPUs).",
    )
    session_secret: SecretStr | None = Field(
        default=None,
        description="Key that signs web sign-in cookies and CSRF tokens (default: a random key kept in "
        "`session.key` in the data dir; set the same value on every host behind one load balancer).",
    )
    session_hours: float = Field(
        default=12.0, gt=0, description="How long a web sign-in lasts (the token's own expiry still applies)."
    )
    secure_cookies: bool | None = Field(
        default=None,
        description="Mark the sign-in cookie `Secure` (default: when `LOGTRIAGE_PUBLIC_URL` is https).",
    )
    api_docs: bool = Field(
        default=True, description="Serve the interactive API docs at /docs (assets served locally)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Server log level."
    )

    # --- Slack bot (docs/slack.md) -----------------------------------------------------------
    slack_bot_token: SecretStr | None = Field(
        default=None,
        description="Slack bot token (`xoxb-...`). With the signing secret it turns on `/slack/events`; "
        "with the app token, Socket Mode. Unset: no Slack (the route answers 404).",
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None,
        description="Slack app signing secret: every request to `/slack/events` must carry a valid "
        "signature made with it, at most 5 minutes old.",
    )
    slack_app_token: SecretStr | None = Field(
        default=None,
        description="Slack app-level token (`xapp-...`, scope `connections:write`): `logtriage serve` "
        "also receives events over Socket Mode (no inbound connection needed).",
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        pattern=r"^https?://[^/?#]+(/[^?#]*)?$",
        description="Slack Web API base URL; every Web API call goes there, and files are downloaded "
        "only from Slack's file hosts or from this URL's host.",
    )
    slack_max_file_bytes: int = Field(
        default=512 << 20,
        ge=1,
        description="Largest file the bot downloads from Slack, in bytes as stored there (gzip and "
        "zstd accepted); larger ones are answered with a message instead.",
    )
    slack_repeat_minutes: float = Field(
        default=360.0,
        ge=0,
        description="Hook notifications: a failure with the fingerprint of one already posted to the "
        "channel within this many minutes goes into that post's thread as one line (0 = always post).",
    )
    slack_hosts_channel: str | None = Field(
        default=None,
        description="Slack channel ID told when a host crosses the exclusion threshold (hardware "
        "failures in LOGTRIAGE_SUSPECT_MIN_JOBS jobs within LOGTRIAGE_RECURRENCE_DAYS).",
    )

    # --- `logtriage submit` (the client a failed job's hook runs) -----------------------------
    url: str | None = Field(
        default=None, description="`logtriage submit`: the service's base URL, e.g. http://127.0.0.1:8000."
    )
    token: SecretStr | None = Field(
        default=None, description="`logtriage submit`: API token (scope `ingest`)."
    )

    @property
    def slack_http_enabled(self) -> bool:
        return self.slack_bot_token is not None and self.slack_signing_secret is not None

    @property
    def slack_socket_enabled(self) -> bool:
        return self.slack_bot_token is not None and self.slack_app_token is not None

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'logtriage.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings from the environment; a bad value is a `UsageError` naming its variable."""
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as exc:
        from app.errors import UsageError

        bad = "; ".join(
            f"LOGTRIAGE_{'_'.join(str(p) for p in e['loc']).upper()}={e.get('input')!r}: {e['msg']}"
            for e in exc.errors()
        )
        raise UsageError(f"invalid setting: {bad}") from None


def settings_table() -> str:
    """The markdown table of every setting, as it appears in docs/service.md."""
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = info.default if info.default_factory is None else info.default_factory()  # type: ignore[call-arg]
        if default is None or default == []:
            shown = "(unset)"
        elif isinstance(default, Path):
            shown = f"`{default if default.is_absolute() else './' + str(default)}`"
        elif isinstance(default, bool):
            shown = "`true`" if default else "`false`"
        elif isinstance(default, int) and default >= 1 << 20 and default % (1 << 20) == 0:
            shown = f"`{default}` ({default >> 30} GiB)" if default % (1 << 30) == 0 else f"`{default}`"
        else:
            shown = f"`{default}`"
        desc = (info.description or "").replace("|", "\\|")
        rows.append(f"| `{ENV_PREFIX}{name.upper()}` | {shown} | {desc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m app.settings: print the docs table
    sys.stdout.write(settings_table())
