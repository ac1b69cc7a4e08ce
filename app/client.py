"""`logtriage submit`: what a failed job's hook runs to post its log to the service.

- gzip on the fly (nothing is held in memory or written to disk);
- logs over ``--max-bytes`` are sent as their head and tail with a marker line between;
- retries with exponential backoff and jitter (connection errors, 408/429/5xx/507, honouring
  ``Retry-After``) until ``--deadline`` (10 min), always under one ``Idempotency-Key``, so a
  retry never makes a second analysis; polls an analysis answered 202, and sends the same
  request again (same key: the server runs it again under the same id) when it ends failed
  for a reason of the server's (interrupted by a restart, 503, 507);
- prints the root cause, the fix and the report URL; never reports an analysis it did not get;
- never changes the job's exit status: errors are reported and `submit` exits 0 (``--strict``
  makes it exit non-zero: 2 usage, 3 refused or failed, 4 gave up at the deadline);
- ``--action-exit`` exits with the analysis' decision instead (ACTION_EXIT), ``--shell`` prints it
  as shell assignments, for hooks that requeue or stop by it (docs/hooks.md);
- ``--outcome succeeded|failed`` reports how the next attempt ended (`post_outcome`).
"""

from __future__ import annotations

import email.utils
import io
import json
import os
import random
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urljoin

import httpx

from app.engine.pipeline.ingest import GZIP_MAGIC, ZSTD_MAGIC, human_bytes
from app.errors import RemoteError, SubmitGaveUpError, UsageError
from app.render.action import headline

CHUNK = 1 << 20
# `submit --action-exit`: the exit status per decision (0: no analysis to act on, e.g. the service
# was unreachable; a hook then falls back to its own policy)
ACTION_EXIT = {"retry": 10, "retry_excluding": 11, "fix_and_rerun": 12, "stop": 13, "investigate": 14}
RETRY_STATUS = {408, 429, 500, 502, 503, 504, 507}  # 507: a full disk, freed later
RETRYABLE_FAILURES = {503, 507}  # an analysis failed for the server's reason: send it again
MAX_RESENDS = 5  # of an analysis that keeps failing retryably, within the deadline


@dataclass
class SubmitOptions:
    url: str
    token: str | None = None
    job_id: str | None = None
    framework: str | None = None
    exit_code: int | None = None
    host: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    notify: str | None = None  # a Slack channel ID: the service posts the diagnosis there
    config: Path | None = None
    source: str = "cli"
    max_bytes: int = 256 << 20  # per file, uncompressed; larger logs go as head + tail
    head_bytes: int = 32 << 20
    retries: int | None = None  # None: retry until the deadline
    timeout: float = 60.0  # per attempt (connect/read), seconds
    wait: float = 120.0  # how long to poll an analysis still running
    idempotency_key: str = field(default_factory=lambda: str(uuid.uuid4()))
    backoff: float = 1.0  # first retry delay, seconds (doubles, with jitter)
    max_backoff: float = 60.0  # longest wait between attempts (Retry-After included)
    deadline: float = 600.0  # seconds for everything: attempts, waits, polling, resends
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)


@dataclass(frozen=True)
class Segment:
    path: Path
    start: int
    end: int


def _compressor() -> Any:
    try:
        from isal import isal_zlib

        return isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    except ImportError:  # pragma: no cover - non-x86 platforms
        import zlib

        return zlib.compressobj(1, zlib.DEFLATED, 31)


def _line_start_after(path: Path, offset: int) -> int:
    """The first line start at or after `offset`."""
    if offset <= 0:
        return 0
    with path.open("rb") as fh:
        fh.seek(offset - 1)
        if fh.read(1) == b"\n":
            return offset
        fh.readline()
        return fh.tell()


def plan(path: Path, *, max_bytes: int, head_bytes: int) -> tuple[list[Segment | bytes], bool]:
    """What to send of one file: the whole file, or head + marker + tail. Returns (parts, cut)."""
    size = path.stat().st_size
    if max_bytes <= 0 or size <= max_bytes or _compressed(path):
        return [Segment(path, 0, size)], False
    head = min(head_bytes, max_bytes // 2)
    head_end = _line_start_after(path, head)
    tail_start = _line_start_after(path, max(head_end, size - (max_bytes - head)))
    omitted = tail_start - head_end
    marker = (
        f"\n[logtriage submit: {omitted} bytes ({human_bytes(omitted)}) of {path.name} omitted here; "
        f"sent the first {human_bytes(head_end)} and the last {human_bytes(size - tail_start)}]\n"
    ).encode()
    return [Segment(path, 0, head_end), marker, Segment(path, tail_start, size)], True


def _compressed(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4)
    return head.startswith(GZIP_MAGIC) or head.startswith(ZSTD_MAGIC)


def _raw_chunks(parts: list[Segment | bytes]) -> Iterator[bytes]:
    for part in parts:
        if isinstance(part, bytes):
            yield part
            continue
        with part.path.open("rb") as fh:
            fh.seek(part.start)
            left = part.end - part.start
            while left > 0:
                data = fh.read(min(CHUNK, left))
                if not data:
                    break
                left -= len(data)
                yield data


def gzip_chunks(parts: list[Segment | bytes]) -> Iterator[bytes]:
    comp = _compressor()
    for data in _raw_chunks(parts):
        out = comp.compress(data)
        if out:
            yield out
    yield comp.flush()


class IterReader(io.RawIOBase):
    """A file-like view of an iterator of byte chunks (for streamed multipart parts)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any, /) -> int:
        view = memoryview(b).cast("B")
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(view), len(self._buf))
        view[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


@dataclass
class Body:
    """How to send the files (rebuilt for every attempt: streams cannot be replayed)."""

    files: list[Path]
    config: Path | None
    opts: SubmitOptions
    cut: list[str] = field(default_factory=list)

    def request_kwargs(self) -> dict[str, Any]:
        o = self.opts
        params: dict[str, Any] = {"source": o.source}
        for key in ("job_id", "framework", "exit_code", "host", "notify"):
            value = getattr(o, key)
            if value is not None:
                params[key] = str(value)
        if o.labels:
            params["label"] = [f"{k}={v}" for k, v in o.labels.items()]
        self.cut = []
        plans = []
        for p in self.files:
            parts, was_cut = plan(p, max_bytes=o.max_bytes, head_bytes=o.head_bytes)
            if was_cut:
                self.cut.append(p.name)
            plans.append((p, parts))
        if len(self.files) == 1 and self.config is None:
            path, parts = plans[0]
            params["filename"] = path.name
            if _compressed(path):
                return {
                    "params": params,
                    "content": _raw_chunks(parts),
                    "headers": _ctype("application/octet-stream"),
                }
            headers = {**_ctype("text/plain; charset=utf-8"), "Content-Encoding": "gzip"}
            return {"params": params, "content": gzip_chunks(parts), "headers": headers}
        files: list[tuple[str, tuple[str, IO[bytes], str]]] = []
        for path, parts in plans:
            stream = _raw_chunks(parts) if _compressed(path) else gzip_chunks(parts)
            files.append(
                ("log", (path.name, io.BufferedReader(IterReader(stream)), "application/octet-stream"))
            )
        if self.config is not None:
            files.append(("config", (self.config.name, self.config.open("rb"), "text/plain")))
        return {"params": params, "files": files}


def _ctype(value: str) -> dict[str, str]:
    return {"Content-Type": value}


def _retry_after(resp: httpx.Response | None) -> float | None:
    """Seconds the answer asks us to wait (`Retry-After`: seconds or an HTTP date), if it says."""
    if resp is None:
        return None
    value = resp.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _problem(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}: {resp.text[:300]}"
    if isinstance(body, dict) and "detail" in body:
        return f"HTTP {resp.status_code} {body.get('title', '')}: {body['detail']}"
    return f"HTTP {resp.status_code}"


class Retrier:
    """Attempts, backoff and the deadline of one `submit`."""

    def __init__(self, opts: SubmitOptions, log: Callable[[str], None]) -> None:
        self.opts = opts
        self.log = log
        self.started = opts.clock()
        self.deadline = self.started + opts.deadline
        self.failures = 0  # in a row, reset by a success

    def left(self) -> float:
        return self.deadline - self.opts.clock()

    def gave_up(self, what: str, last: str) -> SubmitGaveUpError:
        took = self.opts.clock() - self.started
        return SubmitGaveUpError(
            f"gave up {what} after {took:.0f} s (--deadline {self.opts.deadline:g} s); last: {last}; "
            "no analysis was reported"
        )

    def wait(self, what: str, last: str, resp: httpx.Response | None) -> None:
        """Wait before the next attempt, or raise SubmitGaveUpError when there is no time left
        (or --retries is spent)."""
        self.failures += 1
        o = self.opts
        if o.retries is not None and self.failures > o.retries:
            raise self.gave_up(what, f"{last} ({self.failures} attempts, --retries {o.retries})")
        asked = _retry_after(resp)
        backoff = min(o.max_backoff, o.backoff * 2 ** (self.failures - 1))
        if asked is None:
            delay = backoff * random.uniform(0.5, 1.0)  # jitter: hooks of one failed job spread out
        else:  # the server's word, a little later so that its clients do not come back as one
            delay = min(o.max_backoff, asked) * random.uniform(1.0, 1.2)
        if delay >= self.left():
            raise self.gave_up(what, last)
        self.log(
            f"logtriage: {what} attempt {self.failures} failed ({last}); retrying in {delay:.1f}s "
            f"({self.left():.0f}s left of --deadline)"
        )
        o.sleep(delay)

    def succeeded(self) -> None:
        self.failures = 0


def _resend_reason(result: dict[str, Any]) -> str | None:
    """Why an analysis that ended `failed` should be sent again (the server's fault), or None."""
    if result.get("status") != "failed":
        return None
    err = result.get("error") or {}
    if err.get("status") in RETRYABLE_FAILURES or str(err.get("type", "")).endswith("/interrupted"):
        return str(err.get("detail") or err.get("title") or "failed")
    return None


def _service(opts: SubmitOptions) -> tuple[str, dict[str, str]]:
    """The service's base URL (checked) and the headers every request of `submit` carries."""
    base = opts.url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise UsageError(f"--url {opts.url!r} must start with http:// or https://")
    headers = {"User-Agent": "logtriage-submit"}
    if opts.token:
        headers["Authorization"] = f"Bearer {opts.token}"
    return base, headers


def submit(
    files: list[Path],
    opts: SubmitOptions,
    *,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """Post the logs; return the analysis resource (done, failed for the log's own reason, or
    still pending when `--wait` ran out). Raises LogtriageError (SubmitGaveUpError at the
    deadline)."""
    for p in files:
        if not p.is_file():
            raise UsageError(f"{p}: no such file")
    if opts.config is not None and not opts.config.is_file():
        raise UsageError(f"{opts.config}: no such config file")
    base, headers = _service(opts)
    headers["Idempotency-Key"] = opts.idempotency_key
    timeout = httpx.Timeout(opts.timeout, connect=min(opts.timeout, 10.0))
    own = client is None
    http = client or httpx.Client(timeout=timeout, headers=headers)
    retrier = Retrier(opts, log)
    url = f"{base}/api/v1/analyses"
    try:
        body = Body(files, opts.config, opts)
        resends = 0
        while True:
            try:
                resp = _post_with_retries(http, url, body, body.opts, headers=headers, retrier=retrier)
            except RemoteError as exc:
                if isinstance(exc, SubmitGaveUpError) or not (body.opts.notify and "notify:" in exc.detail):
                    raise
                # the diagnosis matters more than the Slack post: send it again without the channel
                log(f"logtriage: {exc.detail}; submitting without --notify")
                body.opts = replace(body.opts, notify=None)
                continue
            if body.cut:
                log(
                    f"logtriage: sent the head and tail of {', '.join(body.cut)} "
                    f"(over {human_bytes(opts.max_bytes)})"
                )
            result = _poll(http, resp, headers=headers, opts=opts, retrier=retrier, log=log)
            why = _resend_reason(result)
            if why is None:
                return result
            resends += 1
            last = f"analysis {result.get('id')} failed: {why}"
            if resends > MAX_RESENDS:
                raise retrier.gave_up("submitting", f"{last} ({resends} times)")
            # the same body under the same Idempotency-Key: the server runs it again, same id
            retrier.wait("the analysis", last, None)
    finally:
        if own:
            http.close()


def _poll(
    http: httpx.Client,
    resp: httpx.Response,
    *,
    headers: dict[str, str],
    opts: SubmitOptions,
    retrier: Retrier,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The analysis of an accepted upload: polled while pending, for up to --wait seconds (and
    never past the deadline); transient failures of a poll are retried."""
    result: dict[str, Any] = resp.json()
    location = resp.headers.get("location") or result.get("links", {}).get("self")
    if location:
        location = urljoin(str(resp.request.url), location)  # a relative Location is the server's
    until = min(opts.clock() + opts.wait, retrier.deadline)
    interval = _retry_after(resp) or 2.0
    while result.get("status") == "pending" and location and opts.clock() < until:
        opts.sleep(min(interval, 10.0, max(0.0, until - opts.clock())))
        try:
            resp = http.get(location, headers=headers)
        except httpx.TransportError as exc:
            retrier.wait(f"polling {location}", type(exc).__name__, None)
            continue
        if resp.status_code in RETRY_STATUS:
            retrier.wait(f"polling {location}", _problem(resp), resp)
            continue
        if resp.status_code != 200:
            raise RemoteError(_problem(resp))
        retrier.succeeded()
        result = resp.json()
        interval = _retry_after(resp) or interval
    return result


def _post_with_retries(
    http: httpx.Client,
    url: str,
    body: Body,
    opts: SubmitOptions,
    *,
    headers: dict[str, str],
    retrier: Retrier,
) -> httpx.Response:
    while True:
        resp: httpx.Response | None = None
        kwargs = body.request_kwargs()
        try:
            extra = kwargs.pop("headers", {})
            resp = http.post(url, headers={**headers, **extra}, **kwargs)
        except httpx.TransportError as exc:
            last = f"{type(exc).__name__}: {exc}".rstrip(": ")
        finally:
            if opts.config is not None:
                for item in kwargs.get("files", []):
                    if item[0] == "config":
                        item[1][1].close()
        if resp is not None:
            if resp.status_code in (200, 201, 202):
                retrier.succeeded()
                return resp
            last = _problem(resp)
            if resp.status_code not in RETRY_STATUS:
                raise RemoteError(last)
        retrier.wait("submitting", last, resp)


def format_result(res: dict[str, Any], *, max_fix_lines: int = 14) -> str:
    """The hook's output: root cause, fix, recurrence, suspect nodes, report URL."""
    url = res.get("permalink") or res.get("links", {}).get("report_html", "")
    status = res.get("status")
    if status == "pending":
        return f"logtriage: analysis {res.get('id')} is still running; it will be at {url}\n"
    if status == "failed":
        err = res.get("error") or {}
        return f"logtriage: analysis {res.get('id')} failed: {err.get('detail', 'unknown error')}\n"
    root = res.get("root_cause")
    out = []
    action = res.get("action")
    if action:
        out.append(f"logtriage: the job: {headline(action)} [{action['decision']}]")
    if root is None:
        out.append("logtriage: no known failure matched (nothing is guessed)")
        for step in (res.get("next_steps") or [])[:3]:
            out.append(f"  next: {step}")
    else:
        out.append(f"logtriage: root cause: {root['title']}")
        out.append(
            f"  class: {root['failure_class']} ({root['kind']}, {root['severity']}, "
            f"confidence {root['confidence']:.2f})"
        )
        fix = root.get("remediation", "").strip().splitlines()
        if fix:
            out.append("  fix:")
            out += [f"    {line}" for line in fix[:max_fix_lines]]
            if len(fix) > max_fix_lines:
                out.append("    … (see the report)")
        for p in (root.get("patches") or [])[:3]:
            rendered = p["rendered"].strip().splitlines()
            out.append(f"  patch ({p['target']}): {rendered[0] if rendered else ''}")
            out += [f"    {line}" for line in rendered[1:6]]
    for f in res.get("findings") or []:
        if f.get("role") == "related":
            out.append(f"  also: {f['title']} ({f['failure_class']})")
    rec = res.get("recurrence")
    if rec and rec.get("total", 0) > 1:
        out.append(f"  recurring: {rec['summary']}")
    for s in res.get("suspect_hosts") or []:
        out.append(f"  suspect node: {s['host']} (hardware failures in {s['jobs']} jobs): drain it")
    if res.get("duplicate_of"):
        out.append(f"  same log as analysis {res['duplicate_of']}")
    out.append(f"  report: {url}")
    return "\n".join(out) + "\n"


def shell_lines(res: dict[str, Any]) -> str:
    """The analysis as shell assignments (`eval "$(logtriage submit --shell ...)"`), quoted."""
    action = res.get("action") or {}
    root = res.get("root_cause") or {}
    values = {
        "LOGTRIAGE_STATUS": res.get("status") or "",
        "LOGTRIAGE_ANALYSIS_ID": res.get("id") or "",
        "LOGTRIAGE_DECISION": action.get("decision") or "",
        "LOGTRIAGE_EXCLUDE_HOSTS": ",".join(action.get("exclude_hosts") or []),
        "LOGTRIAGE_CLASS": root.get("failure_class") or "",
        "LOGTRIAGE_REPORT": res.get("permalink") or "",
    }
    return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())


@dataclass
class OutcomeOptions:
    job_id: str
    status: str  # succeeded | failed
    action: str | None = None  # what the attempt did; None: what was advised
    attempt_id: str | None = None
    analysis_id: str | None = None
    started_at: str | None = None
    excluded_hosts: list[str] = field(default_factory=list)
    detail: str | None = None


def post_outcome(
    outcome: OutcomeOptions,
    opts: SubmitOptions,
    *,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """POST /api/v1/jobs/{job}/outcomes with the same retries and deadline as a log; an attempt
    id (given, or one per call) makes a retried post count once."""
    base, headers = _service(opts)
    body = {k: v for k, v in vars(outcome).items() if k != "job_id" and v not in (None, [])}
    body.setdefault("attempt_id", f"submit-{opts.idempotency_key}")
    url = f"{base}/api/v1/jobs/{quote(outcome.job_id, safe='')}/outcomes"
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(opts.timeout, connect=min(opts.timeout, 10.0)))
    retrier = Retrier(opts, log)
    try:
        while True:
            resp: httpx.Response | None = None
            try:
                resp = http.post(url, json=body, headers=headers)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if resp is not None:
                if resp.status_code in (200, 201):
                    result: dict[str, Any] = resp.json()
                    return result
                last = _problem(resp)
                if resp.status_code not in RETRY_STATUS:
                    raise RemoteError(last)
            retrier.wait("sending the outcome", last, resp)
    finally:
        if own:
            http.close()


def env_default(name: str) -> str | None:
    value = os.environ.get(name)
    return value or None


def dump_json(res: dict[str, Any]) -> str:
    return json.dumps(res, indent=2) + "\n"
