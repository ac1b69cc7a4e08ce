"""The site rule pack: rules a site taught its service, next to the bundled library (issue 23).

Two sources, merged (a stored rule wins over a file of the same id):
- published drafts, stored in `site_rules` (a row per version: the latest of each id counts;
  a version published with ``status: deprecated`` withdraws the rule);
- YAML directories named by ``LOGTRIAGE_RULE_PACKS`` (``:``-separated), for teams that keep
  their rules in git: rule files as in ``rules/<group>/``, and an optional ``classes.yaml``
  (``- {id: site.<name>, kind: infra, summary: ...}``).

Every analysis job carries the pack of the moment (`SiteRules`, a few KB), so each scan worker,
in any process or on any host, triages with it from the next job on: no restart. The server
reads the pack again at most every ``TTL`` seconds (a publish in this process at once).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from app.errors import RuleError
from app.service.jobs import SiteRules
from app.settings import Settings

__all__ = ["TTL", "SitePackSource", "load_dirs", "pack_entries"]

log = logging.getLogger("logtriage.service")

TTL = 2.0  # seconds a read pack is used before the store is asked again
MAX_RULES = 500


def load_dirs(dirs: list[Path]) -> tuple[list[tuple[dict[str, Any], str]], list[dict[str, str]]]:
    from app.engine.pipeline.library import load_pack_dirs

    return load_pack_dirs(dirs)


def pack_entries(rows: list[Any]) -> tuple[list[tuple[dict[str, Any], str]], list[dict[str, str]]]:
    """Stored site rules (every version) -> the pack: each id's latest, without withdrawn ones."""
    latest: dict[str, Any] = {}
    for r in rows:
        if r.rule_id not in latest or r.version > latest[r.rule_id].version:
            latest[r.rule_id] = r
    rules: list[tuple[dict[str, Any], str]] = []
    classes: list[dict[str, str]] = []
    for rid in sorted(latest):
        r = latest[rid]
        body = dict(r.rule.get("rule") or {})
        if body.get("status") == "deprecated":
            continue
        rules.append((body, f"site:{rid}@{r.version}"))
        if r.rule.get("site_class"):
            classes.append({k: str(v) for k, v in r.rule["site_class"].items()})
    return rules, classes


class SitePackSource:
    """The current pack for the jobs this process sends (thread-safe; `get` never blocks the
    event loop: a stale pack is re-read in a thread)."""

    def __init__(self, settings: Settings, db: Any, base: Any) -> None:
        self.settings = settings
        self.db = db
        self.base = base  # the bundled Library: a pack is checked against it before it is used
        self._pack: SiteRules | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()
        self.problem: str | None = None  # why the last read pack was not used

    def read(self) -> SiteRules | None:
        """Read the pack now (blocking: database and files). A pack that does not load (a bad
        file in a pack directory) is not used: the last good one stays, and ``problem`` says
        why (readiness shows it)."""
        try:
            pack = self._read()
            if pack is not None:
                from app.engine.pipeline.library import SitePack

                SitePack.build(list(pack.rules), base=self.base, classes=list(pack.classes))
        except RuleError as exc:
            log.warning("site rule pack not loaded, keeping the last good one: %s", exc)
            with self._lock:
                self.problem, self._read_at = str(exc), time.monotonic()
                return self._pack
        with self._lock:
            self._pack, self._read_at, self.problem = pack, time.monotonic(), None
        return pack

    def _read(self) -> SiteRules | None:
        from sqlalchemy import select

        from app.db.models import SiteRule

        file_rules, file_classes = load_dirs(list(self.settings.rule_packs))
        with self.db.read() as s:
            rows = list(s.scalars(select(SiteRule)))
        db_rules, db_classes = pack_entries(rows)
        merged: dict[str, tuple[dict[str, Any], str]] = {}
        for data, origin in [*file_rules, *db_rules]:
            merged[str(data.get("id"))] = (data, origin)
        rules = tuple(merged[k] for k in sorted(merged))[:MAX_RULES]
        seen: dict[str, dict[str, str]] = {}
        for c in [*file_classes, *db_classes]:
            seen.setdefault(c.get("id", ""), c)
        classes = tuple(seen[k] for k in sorted(seen))
        if not rules and not classes:
            pack = None
        else:
            import json

            body = json.dumps([rules, classes], sort_keys=True, default=str).encode()
            pack = SiteRules(hashlib.sha256(body).hexdigest()[:12], rules, classes)
        return pack

    def invalidate(self) -> None:
        with self._lock:
            self._read_at = 0.0

    def cached(self) -> tuple[bool, SiteRules | None]:
        with self._lock:
            return time.monotonic() - self._read_at < TTL, self._pack

    async def get(self) -> SiteRules | None:
        fresh, pack = self.cached()
        if fresh:
            return pack
        return await asyncio.to_thread(self.read)

    def get_blocking(self) -> SiteRules | None:
        fresh, pack = self.cached()
        return pack if fresh else self.read()
