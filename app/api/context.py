"""What the app builds once in its lifespan and every request uses."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2

from app.api.authcache import AuthCache
from app.blobstore import BlobStore
from app.db.session import Database
from app.engine.library import Library
from app.pipeline import AnalysisService, ScanPool
from app.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    db: Database
    store: BlobStore
    library: Library
    pool: ScanPool
    service: AnalysisService
    templates: jinja2.Environment
    auth: AuthCache
