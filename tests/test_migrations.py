"""Alembic migrations on both backends: upgrade from empty, models == migrated schema, downgrade."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from app.db.migrate import current_revision, downgrade, ensure_current, head_revision, upgrade
from app.db.models import Base
from app.db.session import make_engine
from tests.servicekit import PgSchemas, cli_env, make_settings, run_cli

# slow: alembic upgrades and downgrades, through the CLI, on both databases
pytestmark = pytest.mark.slow

TABLES = {
    "analyses",
    "analysis_files",
    "api_tokens",
    "blobs",
    "feedback",
    "finding_hosts",
    "findings",
    "recurrence_days",
    "recurrence_hosts",
    "recurrence_jobs",
    "recurrence_totals",
    "retriages",
    "rule_versions",
    "slack_events",
    "slack_messages",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    schemas: PgSchemas = request.getfixturevalue("pg_schemas")
    return schemas.new()


def test_upgrade_from_empty_matches_models_and_downgrades(empty_url: str, tmp_path: Path) -> None:
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        assert set(inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as conn:
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
            )
        assert diff == [], f"models and migrations differ: {diff}"
        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert not TABLES & set(inspect(engine).get_table_names())
        assert ensure_current(engine, lock_dir=tmp_path) is True  # what `serve` does on start
        assert ensure_current(engine, lock_dir=tmp_path) is False
    finally:
        engine.dispose()


def test_db_cli_upgrade_current_downgrade(empty_url: str, tmp_path: Path) -> None:
    env = cli_env(make_settings(tmp_path / "data", empty_url))
    behind = run_cli("db", "current", env=env)
    assert behind.returncode == 1 and "behind" in behind.stdout
    up = run_cli("db", "upgrade", env=env)
    assert up.returncode == 0, up.stderr
    assert f"empty -> {head_revision()}" in up.stdout
    assert run_cli("db", "current", env=env).returncode == 0
    down = run_cli("db", "downgrade", "base", env=env)
    assert down.returncode == 0, down.stderr
    assert f"{head_revision()} -> empty" in down.stdout


def test_0006_gives_stored_analyses_fingerprint_version_1_and_drops_it_again(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade(engine, "0005")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO analyses (id, created_at, status, source, labels, fingerprint) "
                    "VALUES ('01J0000000000000000000000A', :t, 'done', 'api', '{}', 'abc')"
                ),
                {"t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},
            )
        upgrade(engine, "0006")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fingerprint, fingerprint_version FROM analyses")).all() == [
                ("abc", 1)
            ]
        downgrade(engine, "0005")
        assert "fingerprint_version" not in {c["name"] for c in inspect(engine).get_columns("analyses")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fingerprint FROM analyses")).all() == [("abc",)]
    finally:
        engine.dispose()


def test_the_head_revision_is_read_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`/readyz` compares the database's revision with the code's head on every probe: the
    scripts are read (executed) once, not per probe."""
    from alembic.script import ScriptDirectory

    from app.db import migrate

    head = head_revision()
    assert ScriptDirectory.from_config(migrate.alembic_config("sqlite://")).get_heads() == [head]

    def read_again(*_a: object, **_k: object) -> None:
        raise AssertionError("the migration scripts were read again")

    monkeypatch.setattr(migrate.ScriptDirectory, "from_config", read_again)
    assert head_revision() == head
