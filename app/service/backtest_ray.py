"""A draft's back-test split over Ray tasks (issue 23: "beyond one host through Ray").

::

    driver (run_backtest)                                   Ray tasks (one per shard, SPREAD)
      plan: signal lines per analysis, newest first  ──>     read its id range's lines from the
      cut at BACKTEST_ROWS, split into id ranges             database (the driver's URL, no
      of about equal line counts                             password), scan them with the
      concatenate the shards' matches in range order  <──    in-process loop (scan_signal_lines)
      classes_of, unknown/conflicts/changes (as ever)

The shards are contiguous ranges of the back-test's own order (analysis id descending, then
position) and every analysis lies in one shard, so the concatenated matches are the in-process
ones, in the same order, and the lines read add up to the same count; the last shard stops at the
same row the in-process fetch stops at. Only the timings differ (and, when a shard runs out of
time, which lines were left unread: both paths then say ``complete: false``).

Used when ``LOGTRIAGE_BACKTEST_RAY_ADDRESS`` is set and the history holds at least
``LOGTRIAGE_BACKTEST_RAY_MIN_LINES`` lines; otherwise, and whenever Ray cannot be reached or a task
fails, the back-test runs in process (same result, logged). Every node needs logtriage installed
and the database reachable: PostgreSQL for several hosts (the password, if any, from each node's
``PGPASSWORD`` or ``~/.pgpass``: it is not shipped with the tasks); SQLite only where every node
sees the same file (one machine).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.db.session import Database
    from app.settings import Settings

log = logging.getLogger("logtriage.backtest")

# (matched ids in order, lines read, complete, finished in time, shards)
Scanned = tuple[list[str], int, bool, bool, int]
WAIT_GRACE_S = 5.0  # past the back-test's own budget, how long the driver waits for its tasks


@dataclass(frozen=True)
class RayBacktest:
    address: str  # auto | local | ray://host:10001 | host:port (as `retriage --ray-address`)
    min_lines: int = 100_000  # a smaller history is back-tested in process
    shards: int = 0  # Ray tasks per back-test; 0: the cluster's CPUs


def options_of(settings: Settings) -> RayBacktest | None:
    if not settings.backtest_ray_address:
        return None
    return RayBacktest(
        address=settings.backtest_ray_address,
        min_lines=settings.backtest_ray_min_lines,
        shards=settings.backtest_ray_shards,
    )


@dataclass(frozen=True)
class Shard:
    hi: str  # newest analysis id of the range (inclusive)
    lo: str  # oldest (inclusive)
    lines: int  # lines to read from hi down: the range's lines, or fewer where the limit cuts


def line_counts(session: Session) -> list[tuple[str, int]]:
    """(analysis id, its signal lines) for every analysis with any, newest id first."""
    from sqlalchemy import func, select

    from app.db.models import AnalysisSignal

    rows = session.execute(
        select(AnalysisSignal.analysis_id, func.count())
        .group_by(AnalysisSignal.analysis_id)
        .order_by(AnalysisSignal.analysis_id.desc())
    )
    return [(a, n) for a, n in rows]


def split(counts: list[tuple[str, int]], *, shards: int, limit: int) -> list[Shard]:
    """The first `limit` lines of the back-test's order in at most `shards` id ranges of about
    equal line counts, newest first; an analysis is never split between two."""
    take = min(sum(n for _a, n in counts), limit)
    per = -(-take // max(1, shards)) if take else 0
    out: list[Shard] = []
    hi: str | None = None
    lines = seen = 0
    for aid, n in counts:
        if seen >= take:
            break
        n = min(n, take - seen)  # the limit may cut the last analysis short, as the fetch does
        hi = hi or aid
        lines += n
        seen += n
        if lines >= per or seen >= take:
            out.append(Shard(hi, aid, lines))
            hi, lines = None, 0
    return out


def shard_lines(session: Session, shard: Shard) -> list[tuple[str, int, str]]:
    """One shard's lines, in the back-test's order: (analysis id, position, text)."""
    from sqlalchemy import select

    from app.db.models import AnalysisSignal

    stmt = (
        select(AnalysisSignal.analysis_id, AnalysisSignal.position, AnalysisSignal.text)
        .where(AnalysisSignal.analysis_id <= shard.hi, AnalysisSignal.analysis_id >= shard.lo)
        .order_by(AnalysisSignal.analysis_id.desc(), AnalysisSignal.position)
        .limit(shard.lines)
    )
    return [(a, p, t) for a, p, t in session.execute(stmt)]


def worker_url(url: str) -> str:
    """The database URL the tasks get: the driver's, without its password (each node supplies its
    own: PGPASSWORD, ~/.pgpass or trust), a SQLite path made absolute."""
    from pathlib import Path

    from sqlalchemy import URL, make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        u = u.set(database=str(Path(u.database).resolve()))
    u = URL.create(u.drivername, u.username, None, u.host, u.port, u.database, u.query)
    return u.render_as_string(hide_password=False)


# --- task side -----------------------------------------------------------------------------------

_DBS: dict[str, Database] = {}  # per Ray worker process: one engine per database URL


@functools.lru_cache(maxsize=32)
def _matcher(pattern: str) -> tuple[Any, list[str]]:
    from app.service.backtest_scan import backtest_matcher

    return backtest_matcher(pattern)


def backtest_shard(url: str, pattern: str, shard: Shard, budget_s: float) -> tuple[list[str], int, bool, str]:
    """A Ray task: read one shard's lines and scan them. Returns the matched ids in order, the
    lines read, whether it finished within `budget_s`, and the node it ran on."""
    started = time.monotonic()
    from app.db.session import Database
    from app.service.backtest_scan import scan_signal_lines

    db = _DBS.get(url)
    if db is None:
        db = _DBS[url] = Database(url)
    rx, lits = _matcher(pattern)
    with db.read() as s:
        rows = shard_lines(s, shard)
    ids, read, finished = scan_signal_lines(rows, rx=rx, lits=lits, started=started, budget_s=budget_s)
    ray = sys.modules.get("ray")  # in a Ray worker; called directly (tests), Ray may not be running
    node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
    return ids, read, finished, node


# --- driver side ---------------------------------------------------------------------------------

_LOCK = threading.Lock()
_REMOTE: dict[str, Any] = {}
last_nodes: list[str] = []  # the nodes the last back-test's tasks ran on (for the bench and tests)


def _remote_task(address: str) -> tuple[Any, Any]:
    """Ray, connected (once per process, kept: back-tests come one after another), and the task."""
    from app.service.retriage import connect_ray, import_ray

    ray = import_ray(local=address == "local")
    with _LOCK:
        connect_ray(ray, address)  # a no-op when connected already (the caller's ray.init too)
        task = _REMOTE.get("task")
        if task is None:
            task = _REMOTE["task"] = ray.remote(num_cpus=1, max_retries=1)(backtest_shard)
    return ray, task


def scan(
    db: Database, options: RayBacktest, *, pattern: str, started: float, budget_s: float
) -> Scanned | None:
    """The back-test's scan on Ray; None: run it in process (a small history, or Ray failed)."""
    from app.service.backtest_scan import BACKTEST_ROWS

    with db.read() as s:
        counts = line_counts(s)
    stored = sum(n for _a, n in counts)
    if not stored or stored < options.min_lines:
        return None
    try:
        ray, task = _remote_task(options.address)
        n = options.shards or max(1, int(ray.cluster_resources().get("CPU", 1)))
        shards = split(counts, shards=n, limit=BACKTEST_ROWS)
        url = worker_url(db.url)
        left = max(0.0, budget_s - (time.monotonic() - started))
        refs = [task.options(scheduling_strategy="SPREAD").remote(url, pattern, sh, left) for sh in shards]
        try:
            results = ray.get(refs, timeout=left + WAIT_GRACE_S)
        except BaseException:
            for r in refs:
                ray.cancel(r, force=True)
            raise
    except Exception as exc:
        why = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        log.warning("back-test on Ray failed (%s); running it in process", why)
        return None
    ids: list[str] = []
    read = 0
    finished = True
    last_nodes[:] = [node for *_r, node in results]
    for got, n, done, _node in results:
        ids += got
        read += n
        finished = finished and done
    return ids, read, stored <= BACKTEST_ROWS, finished, len(shards)
