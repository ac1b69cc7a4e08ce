"""What a running service builds once and every edge (REST, web pages, Slack) uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.blobstore import BlobStore
from app.db.session import Database
from app.engine.library import Library
from app.service.analyses import AnalysisService
from app.service.pool import ScanPool
from app.settings import Settings

if TYPE_CHECKING:
    from app.service.notify import Notifier


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
