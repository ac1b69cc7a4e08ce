"""Storage functions, the blob store and the persist step, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.blobstore import blob_store_for
from app.db import repo, rollup
from app.db.migrate import downgrade, upgrade
from app.db.models import Feedback, RecurrenceDay, RecurrenceHost, RecurrenceJob, RecurrenceTotal
from app.db.session import Database
from app.engine import fingerprint as fingerprinting
from app.engine.fingerprint import fingerprint
from app.errors import ConflictError, NotFoundError, UsageError
from app.service.analyses import AnalysisService
from app.service.jobs import ScanOutcome, StoredFile
from app.service.pool import ScanPool
from tests.conftest import Analyze, run_async
from tests.servicekit import ECC, OOM, PgSchemas, make_settings


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'repo.db'}"
    else:
        schemas: PgSchemas = request.getfixturevalue("pg_schemas")
        url = schemas.new()
    database = Database(url)
    upgrade(database.engine)
    try:
        yield database
    finally:
        database.dispose()


def result_of(analyze: Analyze, text: str, **opts: Any) -> dict[str, Any]:
    return analyze(text, **opts).model_dump(mode="json")


def store_analysis(
    db: Database,
    tmp_path: Path,
    analysis: dict[str, Any],
    *,
    content: bytes,
    meta: repo.JobMeta | None = None,
) -> str:
    store = blob_store_for(tmp_path / "data")
    with store.writer() as w:
        w.write(content)
        blob = w.finish()
    store.commit(blob)
    with db.write() as s:
        row = repo.create_pending(s, meta=meta or repo.JobMeta(), token_id=None, runner="test:1")
        item = repo.Completion(
            analysis_id=row.id,
            analysis=analysis,
            library_version="0.1.0",
            files=[repo.FileRecord("job.log", repo.StoredBlob(blob.sha256, blob.size, blob.stored_size))],
            config=None,
            rules=[
                repo.RuleRecord(
                    "cuda-out-of-memory", 1, "id: cuda-out-of-memory\n", "cuda.out_of_memory", "OOM"
                )
            ],
        )
        repo.complete_analyses(s, items=[item])
        return row.id


def test_ids_are_ulids_sorted_by_time() -> None:
    a = repo.new_id(dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    b = repo.new_id(dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
    assert len(a) == 26 and a < b and repo.is_valid_id(a)
    assert repo.id_time(b).year == 2025
    assert not repo.is_valid_id("../../etc/passwd") and not repo.is_valid_id("Z" * 26)


def test_fingerprint_ignores_volatile_parts() -> None:
    assert fingerprint("oom", {"size": "1.96 GiB"}) == fingerprint("oom", {"size": "3.50 GiB"})
    assert fingerprint("oom", {"size": "1 GiB", "host": "node-1"}) == fingerprint(
        "oom", {"size": "2 GiB", "host": "n9"}
    )
    assert fingerprint("oom", {"op": "ALLREDUCE"}) != fingerprint("oom", {"op": "BROADCAST"})
    assert fingerprint("oom", {}) != fingerprint("ecc", {})


# what rows stored before fingerprints had versions hold: version 1 may never change
V1_OOM = "6607afe94d03897df0ccca649b9abf06"


def test_fingerprint_version_1_is_what_stored_rows_hold() -> None:
    assert fingerprint("cuda-out-of-memory", {"size": "1.96 GiB", "host": "node-1"}, version=1) == V1_OOM
    assert fingerprinting.matching("cuda-out-of-memory", {"size": "2 GiB"}) == [V1_OOM]


@pytest.fixture
def fingerprint_v2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A second, coarser version (the rule id alone), registered and made current."""

    def v2(rule_id: str, captures: fingerprinting.Captures) -> str:
        return hashlib.sha256(f"2\x1f{rule_id}".encode()).hexdigest()[:32]

    monkeypatch.setitem(fingerprinting.VERSIONS, 2, v2)
    monkeypatch.setattr(fingerprinting, "CURRENT", 2)
    fingerprinting._fingerprint.cache_clear()
    yield
    fingerprinting._fingerprint.cache_clear()


def test_a_new_fingerprint_version_does_not_split_stored_recurrence(
    db: Database, tmp_path: Path, analyze: Analyze, request: pytest.FixtureRequest
) -> None:
    oom = result_of(analyze, OOM.format(gib="1.5"))
    old = store_analysis(db, tmp_path, oom, content=b"o1\n", meta=repo.JobMeta(job_id="j1"))
    ecc_old = store_analysis(
        db,
        tmp_path,
        result_of(analyze, ECC.format(ip="10.0.0.5")),
        content=b"e1\n",
        meta=repo.JobMeta(job_id="j9"),
    )
    request.getfixturevalue("fingerprint_v2")
    store = blob_store_for(tmp_path / "data")
    with store.writer() as w:
        w.write(b"o2\n")
        blob = w.finish()
    store.commit(blob)
    with db.write() as s:
        row = repo.create_pending(s, meta=repo.JobMeta(job_id="j1"), token_id=None, runner="test:1")
        item = repo.Completion(
            analysis_id=row.id,
            analysis=result_of(analyze, OOM.format(gib="2.5")),
            library_version="0.1.0",
            files=[repo.FileRecord("job.log", repo.StoredBlob(blob.sha256, blob.size, blob.stored_size))],
            config=None,
            rules=[],
        )
        [(new_row, standing)] = repo.complete_analyses(s, items=[item])
        new = new_row.id
    # as the upload is answered: the stored v1 repeat counts, and the same job once
    rec = standing.recurrence
    assert rec is not None and (rec.total, rec.jobs, rec.fingerprint_version) == (2, 1, 2)
    with db.read() as s:
        stored_new, stored_old = repo.get_analysis(s, analysis_id=new), repo.get_analysis(s, analysis_id=old)
        assert (stored_new.fingerprint_version, stored_old.fingerprint_version) == (2, 1)
        assert stored_new.fingerprint == fingerprint("cuda-out-of-memory", {}, version=2)
        root = (stored_old.result or {})["root_cause"]
        assert stored_old.fingerprint == fingerprint(root["rule_id"], root["captures"], version=1)
        # read back later, from either side
        for row in (stored_new, stored_old):
            st = repo.standing_of(s, row=row, days=7, suspect_min_jobs=2)
            assert st.recurrence is not None and (st.recurrence.total, st.recurrence.jobs) == (2, 1)
        # a failure of another rule stays apart under both versions
        ecc = repo.standing_of(s, row=repo.get_analysis(s, analysis_id=ecc_old), days=7, suspect_min_jobs=2)
        assert ecc.recurrence is not None and ecc.recurrence.total == 1


def test_complete_list_recurrence_and_suspects(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    ids = []
    for i, gib in enumerate(("1.5", "2.5")):
        res = result_of(analyze, OOM.format(gib=gib))
        ids.append(
            store_analysis(
                db, tmp_path, res, content=f"oom {i}\n".encode(), meta=repo.JobMeta(job_id=f"j{i}")
            )
        )
    ecc = result_of(analyze, ECC.format(ip="10.0.0.5"))
    for i in range(2):
        store_analysis(db, tmp_path, ecc, content=f"ecc {i}\n".encode(), meta=repo.JobMeta(job_id=f"e{i}"))
    dup = store_analysis(db, tmp_path, ecc, content=b"ecc 0\n", meta=repo.JobMeta(job_id="e9"))
    with db.read() as s:
        rows, cursor = repo.list_analyses(
            s, filters=repo.AnalysisFilter(failure_class="cuda.out_of_memory"), limit=1
        )
        assert len(rows) == 1 and rows[0].id == ids[1] and cursor
        more, end = repo.list_analyses(
            s, filters=repo.AnalysisFilter(failure_class="cuda.out_of_memory"), limit=1, cursor=cursor
        )
        assert [r.id for r in more] == [ids[0]] and end is None
        row = repo.get_analysis(s, analysis_id=ids[0])
        rec = rollup.recurrence(s, fingerprint_=row.fingerprint or "", days=7)
        assert rec is not None and rec.total == 2 and rec.jobs == 2 and rec.first_analysis_id == ids[0]
        assert repo.get_analysis(s, analysis_id=dup).duplicate_of_id is not None
        suspects = repo.suspect_hosts(s, days=7, min_jobs=2)
        assert [x.host for x in suspects] == ["10.0.0.5"] and suspects[
            0
        ].jobs == 2  # the duplicate does not count
        assert repo.suspect_hosts(s, days=7, min_jobs=3) == []
        # the window is the ledger's decay: a week on, the same failures no longer list the host
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=7, minutes=1)
        assert repo.suspect_hosts(s, days=7, min_jobs=2, now=later) == []
        assert [x.host for x in repo.suspect_hosts(s, days=8, min_jobs=2, now=later)] == ["10.0.0.5"]
        now = dt.datetime.now(dt.UTC)
        st = repo.stats(
            s,
            since=now - dt.timedelta(days=1),
            until=now + dt.timedelta(minutes=1),
            recurrence_days=7,
            suspect_min_jobs=2,
        )
        assert st["by_class"]["cuda.out_of_memory"] == 2 and st["by_kind"]["hardware"] == 3
        assert st["top_recurring"][0]["count"] == 2
        with pytest.raises(UsageError):
            repo.decode_cursor("nope")
        with pytest.raises(NotFoundError):
            repo.get_analysis(s, analysis_id=repo.new_id())
        versions = repo.rule_versions(s, rule_id="cuda-out-of-memory")
        assert len(versions) == 1  # one row for many analyses of the same rule version
    with db.write() as s:  # an operator's clearance restarts the count
        repo.clear_host(s, host="10.0.0.5", note="GPU swapped", token_id=None)
    with db.read() as s:
        assert repo.suspect_hosts(s, days=7, min_jobs=1) == []
    store_analysis(db, tmp_path, ecc, content=b"ecc after\n", meta=repo.JobMeta(job_id="e-after"))
    with db.read() as s:
        assert [(x.host, x.jobs) for x in repo.suspect_hosts(s, days=7, min_jobs=1)] == [("10.0.0.5", 1)]


def _counters(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    with db.read() as s:
        return {
            "days": sorted(
                (r.fingerprint, r.day, r.analyses, r.first_at, r.last_at, r.first_analysis_id)
                for r in s.query(RecurrenceDay)
            ),
            "jobs": sorted((r.fingerprint, r.job_key, r.analyses) for r in s.query(RecurrenceJob)),
            "hosts": sorted((r.fingerprint, r.host, r.analyses) for r in s.query(RecurrenceHost)),
            "totals": sorted((r.fingerprint, r.jobs, r.hosts) for r in s.query(RecurrenceTotal)),
        }


def _assert_totals_count_the_rows(db: Database) -> None:
    """The totals row of each fingerprint holds how many job and host rows it has, no more rows."""
    c = _counters(db)
    jobs = Counter(fp for fp, _key, _n in c["jobs"])
    hosts = Counter(fp for fp, _host, _n in c["hosts"])
    assert c["totals"] == sorted((fp, jobs[fp], hosts[fp]) for fp in set(jobs) | set(hosts))


def test_recurrence_counters_follow_retriage(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    oom = result_of(analyze, OOM.format(gib="1.5"))
    ecc = result_of(analyze, ECC.format(ip="10.0.0.7"))
    a = store_analysis(db, tmp_path, oom, content=b"a\n", meta=repo.JobMeta(job_id="ja", host="n1"))
    b = store_analysis(db, tmp_path, oom, content=b"b\n", meta=repo.JobMeta(job_id="jb", host="n2"))
    with db.read() as s:
        fp_oom = repo.get_analysis(s, analysis_id=a).fingerprint or ""
        rec = rollup.recurrence(s, fingerprint_=fp_oom, days=7)
        assert rec is not None and (rec.total, rec.jobs, rec.first_analysis_id) == (2, 2, a)
    # the first analysis turns out to be an ECC failure: it leaves the OOM counts, joins ECC's
    with db.write() as s:
        repo.apply_retriage(s, analysis_id=a, analysis=ecc, library_version="0.2.0", rules=[])
    with db.read() as s:
        rec = rollup.recurrence(s, fingerprint_=fp_oom, days=7)
        assert rec is not None and (rec.total, rec.jobs, rec.first_analysis_id) == (1, 1, b)
        fp_ecc = repo.get_analysis(s, analysis_id=a).fingerprint or ""
        rec_ecc = rollup.recurrence(s, fingerprint_=fp_ecc, days=7)
        assert rec_ecc is not None and (rec_ecc.total, rec_ecc.hosts, rec_ecc.first_analysis_id) == (1, 1, a)
    assert [key for fp, key, _n in _counters(db)["jobs"] if fp == fp_oom] == ["jb"]
    _assert_totals_count_the_rows(db)
    with db.write() as s:
        repo.apply_retriage(s, analysis_id=b, analysis=ecc, library_version="0.2.0", rules=[])
    with db.read() as s:
        assert rollup.recurrence(s, fingerprint_=fp_oom, days=7) is None  # no row left behind
        rec_ecc = rollup.recurrence(s, fingerprint_=fp_ecc, days=7)
        assert rec_ecc is not None and rec_ecc.total == 2 and rec_ecc.jobs == 2
    _assert_totals_count_the_rows(db)
    assert fp_oom not in [fp for fp, *_ in _counters(db)["totals"]]  # emptied: deleted, not left at 0


def test_recurrence_window_is_exact_at_its_start(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    aid = store_analysis(db, tmp_path, result_of(analyze, OOM.format(gib="3")), content=b"w\n")
    with db.read() as s:
        row = repo.get_analysis(s, analysis_id=aid)
        fp, created = row.fingerprint or "", row.created_at
        inside = rollup.recurrence(s, fingerprint_=fp, days=7, now=created + dt.timedelta(days=7, seconds=-1))
        outside = rollup.recurrence(s, fingerprint_=fp, days=7, now=created + dt.timedelta(days=7, seconds=1))
    assert inside is not None and inside.in_window == 1 and inside.total == 1
    assert outside is not None and outside.in_window == 0 and outside.total == 1


def test_migration_backfill_equals_live_counters(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    ecc = result_of(analyze, ECC.format(ip="10.0.0.9"))
    for i, job in enumerate(("e1", "e2", None)):
        store_analysis(db, tmp_path, ecc, content=f"ecc {i}\n".encode(), meta=repo.JobMeta(job_id=job))
    store_analysis(db, tmp_path, ecc, content=b"ecc 0\n", meta=repo.JobMeta(job_id="dup"))  # duplicate
    store_analysis(db, tmp_path, result_of(analyze, OOM.format(gib="9")), content=b"o\n")
    live = _counters(db)
    assert [n for *_, n in live["jobs"]].count(1) == 4 and len(live["hosts"]) == 2
    _assert_totals_count_the_rows(db)
    downgrade(db.engine, "0008")  # the totals alone, backfilled from the counters
    upgrade(db.engine)
    assert _counters(db) == live
    downgrade(db.engine, "0001")
    upgrade(db.engine)
    assert _counters(db) == live


def _contribution(
    analysis_id: str, job: str, hosts: tuple[str, ...], *, days_ago: int = 0
) -> rollup.Contribution:
    return rollup.Contribution(
        fingerprint="f" * 32,
        analysis_id=analysis_id,
        created_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=days_ago),
        job_key=job,
        hosts=hosts,
    )


def test_recurrence_totals_follow_counts_and_uncounts(db: Database) -> None:
    fp = "f" * 32
    a = _contribution("a1", "job-1", ("h1", "h2"))
    b = _contribution("a2", "job-1", ("h2",))
    c = _contribution("a3", "job-2", ("h3",))
    with db.write() as s:
        rollup.count(s, [a, b])  # one group: job-1 twice, h2 twice
    with db.write() as s:
        rollup.count(s, [c])
    _assert_totals_count_the_rows(db)
    with db.read() as s:
        rec = rollup.recurrence(s, fingerprint_=fp, days=7)
        assert rec is not None and (rec.total, rec.jobs, rec.hosts) == (3, 2, 3)
        # an upload being stored: its new job and host are added, its known ones are not
        more = [_contribution("a4", "job-2", ("h9",)), _contribution("a5", "job-7", ("h1",))]
        rec = rollup.recurrence(s, fingerprint_=fp, days=7, pending=more)
        assert rec is not None and (rec.total, rec.jobs, rec.hosts) == (5, 3, 4)
    with db.write() as s:
        rollup.uncount(s, b)  # job-1 and h2 keep a1's analysis
    _assert_totals_count_the_rows(db)
    with db.write() as s:
        rollup.uncount(s, a)
    _assert_totals_count_the_rows(db)
    assert _counters(db)["totals"] == [(fp, 1, 1)]
    with db.write() as s:
        rollup.uncount(s, c)
    assert _counters(db)["totals"] == []


class _Writer:
    """`work(session)` in a transaction of its own, on a thread of its own."""

    def __init__(self, db: Database, work: Callable[[Session], object]) -> None:
        self.db = db
        self.pid: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,))
        self.thread.start()

    def _run(self, work: Callable[[Session], object]) -> None:
        try:
            with self.db.write() as s:
                self.pid = int(s.execute(text("SELECT pg_backend_pid()")).scalar_one())
                work(s)
        except BaseException as exc:
            self.error = exc

    def waits_for_a_lock(self, timeout: float = 60.0) -> bool:
        """True once its backend waits for a lock (polled: nothing tells when another backend
        starts waiting); False if it ended or the time ran out first."""
        poll = threading.Event()  # never set: its wait is the pause between two looks
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if self.pid is not None:
                with self.db.engine.connect() as conn:
                    state = conn.execute(
                        text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :p"), {"p": self.pid}
                    ).scalar()
                if state == "Lock":
                    return True
            poll.wait(0.01)
        return False

    def finish(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive() and self.error is None, self.error


@pytest.fixture
def pg_db(pg_schemas: PgSchemas) -> Iterator[Database]:
    database = Database(pg_schemas.new())
    upgrade(database.engine)
    try:
        yield database
    finally:
        database.dispose()


@pytest.mark.postgres
def test_a_job_two_transactions_add_at_once_counts_once(pg_db: Database) -> None:
    """The second writer of a new job waits on the first one's uncommitted row, then finds it:
    the job is one job, its row holds both analyses (a look-up before the insert counted it twice)."""
    with pg_db.write() as s:
        rollup.count(s, [_contribution("a1", "job-1", ("h1",))])
        # another day: not held up by the first one's day row, only by its job row
        second = _Writer(
            pg_db, lambda s2: rollup.count(s2, [_contribution("a2", "job-1", ("h1",), days_ago=1)])
        )
        assert second.waits_for_a_lock(), "the second writer never waited for the first"
    second.finish()
    c = _counters(pg_db)
    assert c["jobs"] == [("f" * 32, "job-1", 2)] and c["hosts"] == [("f" * 32, "h1", 2)]
    assert c["totals"] == [("f" * 32, 1, 1)]


@pytest.mark.postgres
def test_a_retriage_and_an_upload_of_one_failure_do_not_deadlock(pg_db: Database) -> None:
    """An upload's counting holds the failure's day row; a re-triage taking an analysis off the
    same failure waits for it before touching the job row the upload counts next (taken the other
    way round, each waited for the other and PostgreSQL aborted one)."""
    first = _contribution("a1", "job-1", ("h1",))
    with pg_db.write() as s:
        rollup.count(s, [first])
    with pg_db.write() as s:
        rollup.count(s, [_contribution("a2", "job-2", ("h2",))])  # holds the day row
        retriage = _Writer(pg_db, lambda s2: rollup.uncount(s2, first))
        assert retriage.waits_for_a_lock(), "the re-triage never waited for the upload"
        rollup.count(s, [_contribution("a3", "job-1", ("h1",))])  # job-1's row, next
    retriage.finish()
    c = _counters(pg_db)
    assert [(k, n) for _fp, k, n in c["jobs"]] == [("job-1", 1), ("job-2", 1)]
    _assert_totals_count_the_rows(pg_db)


def test_idempotency_key_is_unique_per_scope(db: Database) -> None:
    with db.write() as s:
        repo.create_pending(
            s, meta=repo.JobMeta(), token_id=None, runner="t:1", idempotency_scope="open", idempotency_key="k"
        )
    with pytest.raises(ConflictError), db.write() as s:
        repo.create_pending(
            s, meta=repo.JobMeta(), token_id=None, runner="t:1", idempotency_scope="open", idempotency_key="k"
        )
    with db.write() as s:
        repo.create_pending(
            s,
            meta=repo.JobMeta(),
            token_id=None,
            runner="t:1",
            idempotency_scope="token:1",
            idempotency_key="k",
        )
        assert repo.find_idempotent(s, scope="open", key="k") is not None


def test_reserving_a_key_inserts_the_pending_row_once_per_scope(db: Database) -> None:
    meta = repo.JobMeta(job_id="j-1", exit_code=137, labels={"team": "rl"})
    first = repo.Draft.new(meta=meta, token_id=None, runner="t:1")
    with db.write() as s:
        assert repo.reserve_key(s, draft=first, scope="open", key="k", request_digest="d1")
    again = repo.Draft.new(meta=repo.JobMeta(), token_id=None, runner="t:2")
    with db.write() as s:
        assert not repo.reserve_key(s, draft=again, scope="open", key="k", request_digest="d2")
    other = repo.Draft.new(meta=repo.JobMeta(), token_id=None, runner="t:1")
    with db.write() as s:
        assert repo.reserve_key(s, draft=other, scope="token:1", key="k", request_digest="d3")
    with db.read() as s:
        row = repo.find_idempotent(s, scope="open", key="k")
        assert row is not None and row.id == first.analysis_id  # the first request's, unchanged
        assert (row.status, row.job_id, row.exit_code, row.labels) == ("pending", "j-1", 137, {"team": "rl"})
        assert (row.request_digest, row.runner) == ("d1", "t:1")
        with pytest.raises(NotFoundError):
            repo.get_analysis(s, analysis_id=again.analysis_id)
        assert repo.get_analysis(s, analysis_id=other.analysis_id).idempotency_scope == "token:1"


def test_tokens_store_only_a_hash(db: Database) -> None:
    with db.write() as s:
        row, secret = repo.create_token(s, name="hook", scopes=["ingest"])
        assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in (
            row.prefix + row.token_hash
        )
        _, old = repo.create_token(
            s, name="old", scopes=["read"], expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
        )
    with db.read() as s:
        assert repo.token_for_secret(s, secret=secret) is not None
        assert repo.token_for_secret(s, secret=old) is None  # expired
        assert repo.any_active_token(s)
    with db.write() as s:
        repo.revoke_token(s, name_or_id="hook")
    with db.read() as s:
        assert repo.token_for_secret(s, secret=secret) is None
        assert not repo.any_active_token(s)
    with pytest.raises(UsageError), db.write() as s:
        repo.create_token(s, name="x", scopes=["root"])


def test_blob_store_is_atomic_and_content_addressed(tmp_path: Path) -> None:
    store = blob_store_for(tmp_path)
    pend = []
    for _ in range(2):
        with store.writer() as w:
            w.write(b"hello\n" * 1000)
            pend.append(w.finish())
    assert pend[0].sha256 == pend[1].sha256 == hashlib.sha256(b"hello\n" * 1000).hexdigest()
    assert pend[0].stored_size < pend[0].size
    assert store.commit(pend[0]) is True
    assert store.commit(pend[1]) is False  # already there
    assert list(store.iter_blobs()) == [pend[0].sha256]
    with store.open(pend[0].sha256) as fh:
        assert fh.read() == b"hello\n" * 1000
    assert not list((tmp_path / "tmp").glob("blob-*"))
    with pytest.raises(RuntimeError), store.writer() as w:
        w.write(b"half")
        raise RuntimeError("crash mid-write")
    assert not list((tmp_path / "tmp").glob("blob-*"))  # no half blob left behind


def test_failed_database_write_deletes_the_new_blob(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    settings = make_settings(tmp_path / "data", db.url)
    store = blob_store_for(settings.data_dir)
    service = AnalysisService(settings=settings, db=db, store=store, pool=ScanPool(settings))
    result = result_of(analyze, OOM.format(gib="1"))
    # the analysis row does not exist: the insert fails, and the blob it created goes away
    [failed] = service._persist_batch([(repo.new_id(), outcome_for(store, result, b"new content\n"), None)])
    assert isinstance(failed, NotFoundError)
    assert list(store.iter_blobs()) == []
    assert not list((settings.data_dir / "tmp").glob("blob-*"))
    # a blob another analysis refers to survives a failed insert that reused it
    store_analysis(db, tmp_path, result, content=b"shared\n")  # same data dir: tmp_path / "data"
    before = set(store.iter_blobs())
    assert len(before) == 1
    [failed] = service._persist_batch([(repo.new_id(), outcome_for(store, result, b"shared\n"), None)])
    assert isinstance(failed, NotFoundError)
    assert set(store.iter_blobs()) == before


def outcome_for(store: Any, result: dict[str, Any], content: bytes) -> ScanOutcome:
    with store.writer() as w:
        w.write(content)
        blob = w.finish()
    return ScanOutcome(analysis=result, library_version="0.1.0", rules=(), files=(StoredFile("a.log", blob),))


def test_mark_interrupted(db: Database) -> None:
    with db.write() as s:
        gone = repo.create_pending(s, meta=repo.JobMeta(), token_id=None, runner="hostA:999999")
        alive = repo.create_pending(s, meta=repo.JobMeta(), token_id=None, runner="hostA:1")
        other = repo.create_pending(s, meta=repo.JobMeta(), token_id=None, runner="hostB:999999")
        ids = gone.id, alive.id, other.id
    with db.write() as s:
        assert repo.mark_interrupted(s, host="hostA", alive=[1]) == 1
    with db.read() as s:
        assert [repo.get_analysis(s, analysis_id=i).status for i in ids] == ["failed", "pending", "pending"]


def test_a_group_is_stored_like_its_uploads_one_by_one(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    settings = make_settings(tmp_path / "data", db.url)
    store = blob_store_for(settings.data_dir)
    service = AnalysisService(settings=settings, db=db, store=store, pool=ScanPool(settings))
    oom = result_of(analyze, OOM.format(gib="4"))
    ids = []
    with db.write() as s:
        for job in ("g1", "g2", "g3"):
            ids.append(repo.create_pending(s, meta=repo.JobMeta(job_id=job), token_id=None, runner="t:1").id)
    contents = [b"group log\n", b"group log\n", b"another log\n"]  # the second repeats the first
    done = service._persist_batch(
        [(aid, outcome_for(store, oom, c), None) for aid, c in zip(ids, contents, strict=True)]
    )
    assert all(not isinstance(d, Exception) for d in done)
    rows = [d.row for d in done if not isinstance(d, Exception)]
    assert [r.duplicate_of_id for r in rows] == [None, ids[0], None]
    assert {r.status for r in rows} == {"done"}
    # every member's answer equals what a later read of it says
    with db.read() as s:
        for d in done:
            assert not isinstance(d, Exception)
            stored = repo.get_analysis(s, analysis_id=d.row.id, full=True)
            assert repo.standing_of(s, row=stored, days=7, suspect_min_jobs=2) == d.standing
            assert d.standing.recurrence is not None
            assert (d.standing.recurrence.total, d.standing.recurrence.jobs) == (
                2,
                2,
            )  # duplicate not counted
    assert _counters(db)["jobs"] == [(rows[0].fingerprint, "g1", 1), (rows[0].fingerprint, "g3", 1)]


def test_one_bad_upload_in_a_group_fails_alone(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    settings = make_settings(tmp_path / "data", db.url)
    store = blob_store_for(settings.data_dir)
    service = AnalysisService(settings=settings, db=db, store=store, pool=ScanPool(settings))
    oom = result_of(analyze, OOM.format(gib="5"))
    with db.write() as s:
        good = repo.create_pending(s, meta=repo.JobMeta(), token_id=None, runner="t:1").id
    gone = repo.new_id()  # no such pending analysis: its write fails
    done = service._persist_batch(
        [(gone, outcome_for(store, oom, b"orphan\n"), None), (good, outcome_for(store, oom, b"fine\n"), None)]
    )
    assert isinstance(done[0], NotFoundError)
    assert not isinstance(done[1], Exception) and done[1].row.status == "done"
    with db.read() as s:
        assert repo.get_analysis(s, analysis_id=good).status == "done"
    # the failed upload's blob is gone, the stored one's stays
    assert set(store.iter_blobs()) == {hashlib.sha256(b"fine\n").hexdigest()}


def test_uploads_finishing_together_are_written_as_one_group(
    db: Database, tmp_path: Path, analyze: Analyze, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path / "data", db.url)
    store = blob_store_for(settings.data_dir)
    service = AnalysisService(settings=settings, db=db, store=store, pool=ScanPool(settings))
    oom = result_of(analyze, OOM.format(gib="6"))
    with db.write() as s:
        ids = [repo.create_pending(s, meta=repo.JobMeta(), token_id=None, runner="t:1").id for _ in range(5)]
    groups: list[int] = []
    real = service._persist_batch

    def recording(batch: list[tuple[str, ScanOutcome, repo.Draft | None]]) -> list[Any]:
        groups.append(len(batch))
        return real(batch)

    monkeypatch.setattr(service, "_persist_batch", recording)

    async def finish_together() -> list[Any]:
        return await asyncio.gather(
            *(
                service._store(aid, outcome_for(store, oom, f"log {i}\n".encode()))
                for i, aid in enumerate(ids)
            )
        )

    done = run_async(finish_together())
    assert groups == [5]  # one transaction for the five
    assert [d.row.id for d in done] == ids and {d.row.status for d in done} == {"done"}

    # a writer that breaks fails every waiting request instead of leaving it hanging
    def broken(batch: list[tuple[str, ScanOutcome, repo.Draft | None]]) -> list[Any]:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service, "_persist_batch", broken)

    async def two() -> list[Any]:
        return await asyncio.gather(
            *(service._store(repo.new_id(), outcome_for(store, oom, f"x {i}\n".encode())) for i in range(2)),
            return_exceptions=True,
        )

    failed = run_async(asyncio.wait_for(two(), timeout=30))
    assert [type(e) for e in failed] == [RuntimeError, RuntimeError]


def _service(db: Database, tmp_path: Path) -> tuple[AnalysisService, Any]:
    settings = make_settings(tmp_path / "data", db.url)
    store = blob_store_for(settings.data_dir)
    return AnalysisService(settings=settings, db=db, store=store, pool=ScanPool(settings)), store


def test_a_group_inserts_new_analyses_and_updates_pending_ones(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    """A hook's upload has no row until it is stored: its row is inserted done, in the same
    group as uploads whose pending rows exist, with the same duplicates, counters and answers."""
    service, store = _service(db, tmp_path)
    oom = result_of(analyze, OOM.format(gib="7"))
    draft = repo.Draft.new(
        meta=repo.JobMeta(job_id="d1", host="n1", labels={"team": "rl"}), token_id=None, runner="t:1"
    )
    with db.write() as s:
        pending = repo.create_pending(s, meta=repo.JobMeta(job_id="p1"), token_id=None, runner="t:1").id
    later = repo.Draft.new(meta=repo.JobMeta(job_id="d2"), token_id=None, runner="t:1")
    done = service._persist_batch(
        [
            (draft.analysis_id, outcome_for(store, oom, b"same log\n"), draft),
            (pending, outcome_for(store, oom, b"same log\n"), None),
            (later.analysis_id, outcome_for(store, oom, b"other log\n"), later),
        ]
    )
    assert all(not isinstance(d, Exception) for d in done), done
    with db.read() as s:
        rows = [
            repo.get_analysis(s, analysis_id=i, full=True)
            for i in (draft.analysis_id, pending, later.analysis_id)
        ]
        for d, row in zip(done, rows, strict=True):
            assert not isinstance(d, Exception)
            assert repo.standing_of(s, row=row, days=7, suspect_min_jobs=2) == d.standing
    assert [r.status for r in rows] == ["done"] * 3
    assert (rows[0].job_id, rows[0].host, rows[0].labels) == ("d1", "n1", {"team": "rl"})
    assert rows[0].created_at.replace(tzinfo=dt.UTC) == draft.created_at
    assert rows[0].runner is None and rows[0].finished_at is not None
    assert [r.duplicate_of_id for r in rows] == [None, draft.analysis_id, None]
    assert [len(r.files) for r in rows] == [1, 1, 1]
    assert _counters(db)["jobs"] == [(rows[0].fingerprint, "d1", 1), (rows[0].fingerprint, "d2", 1)]


def test_register_gives_a_draft_its_pending_row_first(db: Database, tmp_path: Path, analyze: Analyze) -> None:
    service, store = _service(db, tmp_path)
    oom = result_of(analyze, OOM.format(gib="8"))
    draft = repo.Draft.new(meta=repo.JobMeta(job_id="r1"), token_id=None, runner="t:1")
    service._drafts[draft.analysis_id] = draft

    async def scenario() -> Any:
        assert await service.register(draft.analysis_id) is False
        with db.read() as s:
            assert repo.get_analysis(s, analysis_id=draft.analysis_id).status == "pending"
        assert await service.register(draft.analysis_id) is False  # once is enough
        return await service._store(draft.analysis_id, outcome_for(store, oom, b"registered\n"))

    done = run_async(scenario())
    assert done.row.status == "done"
    with db.read() as s:
        assert repo.get_analysis(s, analysis_id=draft.analysis_id).status == "done"


def test_register_while_the_writer_inserts_waits_for_that_row(
    db: Database, tmp_path: Path, analyze: Analyze, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, store = _service(db, tmp_path)
    oom = result_of(analyze, OOM.format(gib="9"))
    draft = repo.Draft.new(meta=repo.JobMeta(job_id="w1"), token_id=None, runner="t:1")
    service._drafts[draft.analysis_id] = draft
    gate = threading.Event()
    committed = threading.Event()
    real = service._persist_batch

    def held(batch: list[tuple[str, ScanOutcome, repo.Draft | None]]) -> list[Any]:
        assert gate.wait(30)
        out = real(batch)
        committed.set()
        return out

    monkeypatch.setattr(service, "_persist_batch", held)
    committed_when_registered: list[bool] = []

    async def scenario() -> tuple[bool, Any]:
        storing = asyncio.create_task(service._store(draft.analysis_id, outcome_for(store, oom, b"held\n")))
        while draft.analysis_id not in service._storing:
            await asyncio.sleep(0.01)
        registering = asyncio.create_task(service.register(draft.analysis_id))
        registering.add_done_callback(lambda _t: committed_when_registered.append(committed.is_set()))
        # one turn of the loop, not a wait for time: the new task runs up to its first await.
        # The writer is held by the gate, so a register that does not wait for it is done here.
        await asyncio.sleep(0)
        assert not registering.done()  # no pending row of its own: it waits for the writer's
        gate.set()
        return await registering, await storing

    waited, done = run_async(asyncio.wait_for(scenario(), timeout=60))
    assert waited is True and done.row.status == "done"
    assert committed_when_registered == [True]  # it answered after the writer's commit, not before
    with db.read() as s:
        assert repo.get_analysis(s, analysis_id=draft.analysis_id).status == "done"


def test_a_failed_draft_leaves_no_row_and_a_registered_one_is_marked_failed(
    db: Database, tmp_path: Path
) -> None:
    service, _ = _service(db, tmp_path)
    drafts = [repo.Draft.new(meta=repo.JobMeta(), token_id=None, runner="t:1") for _ in range(2)]
    for d in drafts:
        service._drafts[d.analysis_id] = d

    async def scenario() -> None:
        await service.register(drafts[1].analysis_id)
        for d in drafts:
            await service._fail(d.analysis_id, UsageError("bad upload"))

    run_async(scenario())
    with db.read() as s:
        with pytest.raises(NotFoundError):
            repo.get_analysis(s, analysis_id=drafts[0].analysis_id)
        failed = repo.get_analysis(s, analysis_id=drafts[1].analysis_id)
    assert failed.status == "failed" and failed.error is not None and failed.error["detail"] == "bad upload"


def test_a_failed_register_leaves_the_row_to_the_writer(
    db: Database, tmp_path: Path, analyze: Analyze, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, store = _service(db, tmp_path)
    oom = result_of(analyze, OOM.format(gib="10"))
    draft = repo.Draft.new(meta=repo.JobMeta(job_id="f1"), token_id=None, runner="t:1")
    service._drafts[draft.analysis_id] = draft

    def down(_draft: repo.Draft) -> None:
        raise OSError("database unreachable")

    monkeypatch.setattr(service, "_insert_pending", down)

    async def scenario() -> Any:
        with pytest.raises(OSError):
            await service.register(draft.analysis_id)
        return await service._store(draft.analysis_id, outcome_for(store, oom, b"after a failed register\n"))

    done = run_async(scenario())
    assert done.row.status == "done"
    with db.read() as s:
        assert repo.get_analysis(s, analysis_id=draft.analysis_id).job_id == "f1"


def test_a_second_run_of_a_done_analysis_leaves_it_as_stored(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    """A hook's retry re-ran an analysis whose first run, taken for dead, was still alive: the
    run that finishes second finds it done and gets it back, writing nothing (its file rows
    would break the unique key)."""
    result = result_of(analyze, OOM.format(gib="2.00"))
    aid = store_analysis(db, tmp_path, result, content=b"first run\n")
    with db.read() as s:
        before = repo.get_analysis(s, analysis_id=aid, full=True)
        files_before = [(f.position, f.blob_sha256) for f in before.files]
    again = repo.Completion(
        analysis_id=aid,
        analysis=result,
        library_version="0.1.0",
        files=[repo.FileRecord("job.log", repo.StoredBlob("0" * 64, 3, 3))],
        config=None,
        rules=[],
    )
    with db.write() as s:
        [(row, _standing)] = repo.complete_analyses(s, items=[again])
        assert row.id == aid and row.status == "done"
    with db.read() as s:
        after = repo.get_analysis(s, analysis_id=aid, full=True)
        assert [(f.position, f.blob_sha256) for f in after.files] == files_before
        assert after.result == before.result


def _waited_for(analyze: Analyze, *, odd_host: str, kind: str = "straggler") -> dict[str, Any]:
    """A collective timeout whose timeline names rank 1, on `odd_host`, as the rank waited for."""
    res = result_of(
        analyze,
        "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n",
    )
    assert res["root_cause"]["failure_class"] == "nccl.collective_timeout"
    res["timeline"] = {
        "verdict": {"kind": kind, "ranks": [1], "summary": "rank 1 never joined"},
        "ranks": [{"rank": 0, "hosts": ["10.3.0.1"]}, {"rank": 1, "hosts": [odd_host]}],
    }
    return res


def test_the_ledger_counts_the_host_a_timed_out_job_waited_for(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    from app.db.repo.completion import odd_rank_hosts

    one = _waited_for(analyze, odd_host="10.3.0.9")
    assert odd_rank_hosts(one) == ["10.3.0.9"]
    assert odd_rank_hosts(_waited_for(analyze, odd_host="10.3.0.9", kind="uniform")) == []
    assert odd_rank_hosts(_waited_for(analyze, odd_host="127.0.0.1")) == []
    store_analysis(db, tmp_path, one, content=b"hang 1\n", meta=repo.JobMeta(job_id="h1"))
    with db.read() as s:
        assert repo.suspect_hosts(s, days=7, min_jobs=2) == []  # one hang is a hang
    second = store_analysis(db, tmp_path, one, content=b"hang 2\n", meta=repo.JobMeta(job_id="h2"))
    with db.read() as s:
        found = repo.suspect_hosts(s, days=7, min_jobs=2)
        assert [(x.host, x.jobs) for x in found] == [("10.3.0.9", 2)]
        assert found[0].classes == [repo.ODD_RANK_CLASS] and found[0].latest_analysis_id == second
        # the ranks that waited are not suspects, and the analysis' standing names the host
        row = repo.get_analysis(s, analysis_id=second)
        assert [x.host for x in repo.standing_of(s, row=row, days=7, suspect_min_jobs=2).suspects] == [
            "10.3.0.9"
        ]


def test_a_full_read_brings_files_and_feedback_in_order_and_keeps_what_the_session_holds(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    aid = store_analysis(db, tmp_path, result_of(analyze, OOM.format(gib="1.5")), content=b"full read\n")
    with db.write() as s:
        for verdict in ("wrong", "correct"):
            s.add(Feedback(analysis_id=aid, verdict=verdict))
    with db.read() as s:
        row = repo.get_analysis(s, analysis_id=aid.lower(), full=True)  # ids are read case-blind
        assert [f.name for f in row.files] == ["job.log"]
        assert [f.verdict for f in row.feedback] == ["wrong", "correct"]  # in the order given
    with db.read() as s:
        row = repo.get_analysis(s, analysis_id=aid, full=True)
        row.feedback.append(Feedback(verdict="correct"))  # not flushed (nor ever written)
        with s.no_autoflush:  # as the selectinload it replaced, a loaded collection is kept
            again = repo.get_analysis(s, analysis_id=aid, full=True)
        assert again is row and [f.verdict for f in again.feedback] == ["wrong", "correct", "correct"]
    with pytest.raises(NotFoundError), db.read() as s:
        repo.get_analysis(s, analysis_id="0" * 26, full=True)


def test_storing_and_reading_analyses_compiles_no_statement_twice(
    db: Database, tmp_path: Path, analyze: Analyze
) -> None:
    """Every hook stores one analysis and its polls read it back: once the first few have, every
    statement a later one runs comes compiled from the engine's cache (a statement that holds its
    rows, as the job counters' `.values(rows)` did, is compiled on every run)."""
    from sqlalchemy import event
    from sqlalchemy.engine.default import CACHE_HIT

    compiled: list[str] = []

    def after(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, _many: bool) -> None:
        if context is not None and context.compiled is not None and context.cache_hit is not CACHE_HIT:
            compiled.append(statement.split("\n")[0][:100])

    def hook(i: int, job: str, gib: str) -> None:
        aid = store_analysis(
            db,
            tmp_path,
            result_of(analyze, OOM.format(gib=gib)),
            content=f"hook {i}\n".encode(),
            meta=repo.JobMeta(job_id=job, host=f"node-{i % 3}"),
        )
        with db.read() as s:
            row = repo.get_analysis(s, analysis_id=aid, full=True)
            assert repo.standing_of(s, row=row, days=7, suspect_min_jobs=2).recurrence is not None

    event.listen(db.engine, "after_cursor_execute", after)
    try:
        for i, job in enumerate(("j1", "j1", "j2")):  # a new job, the same job again, another
            hook(i, job, "1.5")
        assert compiled, "the first hooks compile their statements"
        compiled.clear()
        for i, job in enumerate(("j3", "j3", "j1", "j4", "j5"), start=3):
            hook(i, job, f"{i}.5")
    finally:
        event.remove(db.engine, "after_cursor_execute", after)
    assert compiled == []
