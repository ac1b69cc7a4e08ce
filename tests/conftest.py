from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from app.engine.models import Analysis
from app.engine.pipeline.ingest import collect_sources
from app.engine.pipeline.library import Library, load_library
from app.engine.pipeline.patches import ConfigView
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, triage
from tests import lanes
from tests.s3kit import S3_ENV, S3_ENV_CLEARED, MotoS3, s3_unavailable
from tests.servicekit import LiveServer, PgSchemas, in_ci, live_server, make_settings, pg_reachable

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"

lanes.install_audit_hook()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    # fixtures start servers during setup; lanes needs to know whose setup it is
    lanes.set_current(item)
    try:
        yield
    finally:
        lanes.set_current(None)


@pytest.fixture(scope="session")
def library() -> Library:
    return load_library(RULES)


@pytest.fixture(scope="session")
def compiled(
    library: Library, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> CompiledLibrary:
    # kept between runs (.pytest_cache): compiling costs each test process ~10 s of CPU, and the
    # cache file is named by the patterns' hash and the Hyperscan version, written atomically
    # (app.engine.pipeline.matcher), so a changed rule is compiled afresh; test_scan checks the cache itself
    cache = getattr(pytestconfig, "cache", None)
    cache_dir = cache.mkdir("hs-cache") if cache is not None else tmp_path_factory.mktemp("hs-cache")
    return CompiledLibrary(library, engine="hyperscan", cache_dir=Path(cache_dir))


@pytest.fixture(scope="session")
def compiled_regex(library: Library) -> CompiledLibrary:
    return CompiledLibrary(library, engine="regex")


Analyze = Callable[..., Analysis]


@pytest.fixture
def analyze(compiled: CompiledLibrary, tmp_path: Path) -> Analyze:
    """Write text (or bytes) to a log file and triage it with the real library."""

    def run(
        content: str | bytes,
        *,
        name: str = "job.log",
        compiled_lib: CompiledLibrary | None = None,
        config: str | None = None,
        config_name: str = "job.yaml",
        **opts: object,
    ) -> Analysis:
        path = tmp_path / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        sources, warnings = collect_sources([str(path)])
        view = None
        if config is not None:
            cpath = tmp_path / config_name
            cpath.write_text(textwrap.dedent(config))
            view = ConfigView.load(cpath)
        return triage(
            sources=sources,
            compiled=compiled_lib or compiled,
            options=TriageOptions(**opts),  # type: ignore[arg-type]
            config=view,
            warnings=warnings,
        )

    return run


def make_rules_dir(tmp: Path, rules: dict[str, str]) -> Path:
    """A rule library with the project's classes and only the given rules ({relpath: yaml})."""
    root = tmp / "rules"
    root.mkdir()
    for name in ("library.yaml", "failure-classes.yaml", "class-relations.yaml", "facts.yaml"):
        shutil.copy(RULES / name, root / name)
    for rel, text in rules.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def fixture_text(rel: str) -> str:
    return (RULES / rel).read_text()


# --- service fixtures (database backends, live servers) ---------------------------------------


@pytest.fixture(scope="session")
def pg_schemas() -> Iterator[PgSchemas]:
    """Throw-away PostgreSQL schemas in database `test`; skipped only when the server is truly
    unreachable outside CI (with CI=true an unreachable server fails the tests)."""
    why = pg_reachable()
    if why is not None:
        if in_ci():
            pytest.fail(f"PostgreSQL is required in CI but unreachable: {why}")
        pytest.skip(f"PostgreSQL unreachable on 127.0.0.1:5432 ({why})")
    schemas = PgSchemas()
    try:
        yield schemas
    finally:
        schemas.drop_all()


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh, empty database per test module, on each backend."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "logtriage.db"
        return f"sqlite:///{path}"
    schemas: PgSchemas = request.getfixturevalue("pg_schemas")
    return schemas.new()


@pytest.fixture(scope="module")
def service_data_dir(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one blob store per database, as deployed: a store shared by the SQLite and the PostgreSQL
    # run of a module would hold blobs neither database has rows for
    return tmp_path_factory.mktemp("service-data")


@pytest.fixture(scope="module")
def server(db_url: str, service_data_dir: Path) -> Iterator[LiveServer]:
    """The service under uvicorn on 127.0.0.1 (open mode, no tokens) for a test module."""
    with live_server(make_settings(service_data_dir, db_url)) as srv:
        yield srv


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


# --- S3 (moto's server mode on 127.0.0.1) ------------------------------------------------------


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A real S3 API on 127.0.0.1 (moto server, free port) for this test process, with the AWS
    credentials the app reads set in the environment. Skipped only when moto/obstore are not
    installed outside CI (with CI=true they are required)."""
    why = s3_unavailable()
    if why is not None:
        if in_ci():
            pytest.fail(f"the S3 tests are required in CI: {why}")
        pytest.skip(f"S3 tests: {why}")
    with pytest.MonkeyPatch.context() as mp:
        for name in S3_ENV_CLEARED:
            mp.delenv(name, raising=False)
        for name, value in S3_ENV.items():
            mp.setenv(name, value)
        server = MotoS3().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(moto_s3: MotoS3) -> str:
    """A new, empty bucket on the moto server."""
    return moto_s3.new_bucket()


T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` in a thread of its own: a browser test earlier in the same xdist worker leaves
    Playwright's event loop running in the main thread (the browser is session-scoped), where
    `asyncio.run` would refuse to start."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
