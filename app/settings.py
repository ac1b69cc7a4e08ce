"""Settings from the environment (``LOGTRIAGE_*``), built by a factory, never at import time."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every setting, its default and meaning; `docs/settings.md` is generated from this class."""

    model_config = SettingsConfigDict(env_prefix="LOGTRIAGE_", extra="ignore")

    data_dir: Path = Field(default=Path("./data"), description="Database file (SQLite) and stored log blobs.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test. "
        "Default: SQLite file in the data dir.",
    )
    rules_dir: Path | None = Field(
        default=None, description="Rule library directory (default: the bundled rules/)."
    )
    cache_dir: Path | None = Field(
        default=None, description="Compiled-rule cache (default: $XDG_CACHE_HOME/logtriage)."
    )
    engine: str = Field(
        default="auto", description="Scan engine: auto, hyperscan or regex (portable fallback)."
    )
    max_bytes: int = Field(
        default=20 << 30, description="Largest log accepted, in bytes after decompression (0 = no limit)."
    )
    scan_jobs: int = Field(default=0, description="Processes per scan (0 = one per core for large files).")

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'logtriage.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
