"""What a running service builds once and every edge (REST, web pages, Slack) uses."""

from __future__ import annotations

from dataclasses import dataclass

from app.blobstore import BlobStore
from app.db.session import Database
from app.engine.pipeline.library import Library
from app.service.analyses import AnalysisService
from app.service.pool import ScanPool
from app.settings import Settings


@dataclass
class ServiceContext:
    settings: Settings
    db: Database
    store: BlobStore
    library: Library
    pool: ScanPool
    service: AnalysisService
