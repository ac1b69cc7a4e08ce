"""The few settings an offline `logtriage analyze` needs, without importing pydantic-settings.

`Settings` (app.settings) is the one definition of every setting. Importing it costs
pydantic-settings' import (~50-70 ms, a sixth of the command), which a CLI run over a small log
should not pay when the environment sets nothing. So: no `LOGTRIAGE_*` variable set → the
defaults below, which a test keeps equal to `Settings`' own; any set → `get_settings()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ENV_PREFIX = "LOGTRIAGE_"


@dataclass(frozen=True)
class ScanSettings:
    rules_dir: Path | None = None
    cache_dir: Path | None = None
    engine: str = "auto"
    max_bytes: int = 20 << 30
    scan_jobs: int = 0
    rule_packs: list[Path] = field(default_factory=list)


def scan_settings() -> ScanSettings:
    if any(k.startswith(ENV_PREFIX) for k in os.environ):
        from app.settings import get_settings

        s = get_settings()
        return ScanSettings(
            rules_dir=s.rules_dir,
            cache_dir=s.cache_dir,
            engine=s.engine,
            max_bytes=s.max_bytes,
            scan_jobs=s.scan_jobs,
            rule_packs=list(s.rule_packs),
        )
    return ScanSettings()
