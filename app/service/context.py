"""What a running service builds once and every edge (REST, web pages, Slack) uses."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from app.blobstore import BlobStore
from app.db.session import Database
from app.engine.pipeline.library import Library
from app.service.analyses import AnalysisService
from app.service.pool import ScanPool
from app.settings import Settings


class Notifier(Protocol):
    """Who tells people about analyses (`app.service.notify`); the Slack bot is one."""

    def valid_channel(self, channel: str) -> str | None:
        """None when `channel` can be posted to, else why not."""

    def notify_later(
        self, *, analysis_id: str, channel: str, base: str, pending: asyncio.Task[Any] | None
    ) -> None:
        """Post the analysis to `channel` once it is done (after the answer to the upload)."""

    def analysis_changed(self, *, analysis_id: str, base: str, note: str) -> None:
        """Update what was posted about the analysis (it was re-triaged)."""

    def hosts_flagged(self, *, analysis_id: str, hosts: list[dict[str, Any]]) -> None:
        """Tell operators that hosts crossed the exclusion threshold with this analysis."""


@dataclass(kw_only=True)
class ServiceContext:
    settings: Settings
    db: Database
    store: BlobStore
    library: Library
    pool: ScanPool
    service: AnalysisService
    # who tells people about analyses (the Slack bot, when configured): `app.service.notify`
    notifier: Notifier | None = None
