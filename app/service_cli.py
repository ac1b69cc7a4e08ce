"""Service-side CLI commands, registered into `logtriage`: serve, submit, db, tokens, retriage."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import UsageError

if TYPE_CHECKING:
    from app.settings import Settings

SCOPES = ("ingest", "read", "admin")


def _settings() -> Settings:
    from app.settings import get_settings

    return get_settings()


def _duration(text: str) -> dt.timedelta:
    units = {"m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    t = text.strip().lower()
    try:
        return dt.timedelta(seconds=int(t[:-1]) * units[t[-1]])
    except (KeyError, ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 12h, 7d, 4w, 1y)") from None


def _when(text: str) -> dt.datetime:
    from app.errors import ValidationFailedError
    from app.http.shared import parse_time

    try:
        value = parse_time(text, name="time")
    except ValidationFailedError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None
    assert value is not None
    return value


def _size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256M, 1G, 0)") from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


# --- serve -------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    """Find (and, unless --dry-run, remove) what a crash left: orphan blob files, staging files
    of dead servers, analyses a dead server was running; report rows whose blob file is gone."""
    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        adm.ensure_schema(admin=admin)
        interrupted = 0
        stale = 0
        if not args.dry_run:
            interrupted = adm.mark_interrupted(admin=admin, host=adm.this_host())
            stale = adm.clean_staging(admin=admin)
        swept = adm.sweep(admin=admin, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"orphan blob files: {len(swept.orphans)} ({verb})")
    if not swept.immediate:
        print("  (S3 store: only files older than an hour are considered; other hosts may be writing)")
    if not args.dry_run:
        print(f"staging files of stopped servers: {stale} (removed)")
        print(f"analyses interrupted by a stopped server: {interrupted} (marked failed)")
    print(f"rows whose blob file is missing: {len(swept.missing)}")
    for sha in swept.missing[:20]:
        print(f"  {sha}")
    return 1 if swept.missing else 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.http.deps import is_loopback
    from app.service import admin as adm
    from app.settings import get_settings

    # flags become environment so every uvicorn worker process sees the same settings
    flags = (("host", "HOST"), ("port", "PORT"), ("workers", "WORKERS"), ("health_port", "HEALTH_PORT"))
    for flag, env in flags:
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"LOGTRIAGE_{env}"] = str(value)
    settings = get_settings()
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.triage import default_cache_dir

    # a broken rule file stops here, with a clear error (a changed file misses the cache)
    library = load_library(settings.rules_dir, cache_dir=settings.cache_dir or default_cache_dir())
    with adm.open_admin(settings=settings) as admin:
        adm.wait_for_database(admin=admin, wait_s=args.wait_for_db)
        revision = adm.ensure_schema(admin=admin)
        interrupted = adm.mark_interrupted(admin=admin, host=adm.this_host())
        tokens = adm.any_active_token(admin=admin)
        adm.clean_staging(admin=admin)  # a dead server's staging files and blob claims first
        swept = adm.sweep(admin=admin)
    print(
        f"logtriage: data in {settings.data_dir.resolve()} · database "
        f"{admin.url} (schema {revision}) · rule library "
        f"{library.version} ({len(library.rules)} rules)",
        file=sys.stderr,
    )
    if interrupted:
        print(
            f"logtriage: {interrupted} analyses were interrupted by the last shutdown (marked failed)",
            file=sys.stderr,
        )
    if swept.orphans:
        print(f"logtriage: removed {len(swept.orphans)} blob files left by a crash", file=sys.stderr)
    if not tokens and not settings.require_tokens and not is_loopback(settings.host):
        print(
            f"logtriage: note: bound to {settings.host}, but without a token only loopback clients "
            "that address it by a loopback name (127.0.0.1, localhost, [::1]) get in",
            file=sys.stderr,
        )
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    print(
        f"logtriage: web app on http://{shown}:{settings.port}/ · API http://{shown}:{settings.port}/api/v1 "
        f"· docs http://{shown}:{settings.port}/docs",
        file=sys.stderr,
    )
    import socket

    supervise = settings.workers > 1 or settings.health_port is not None
    if supervise and hasattr(socket, "SO_REUSEPORT"):
        from app.http.serve import serve_reuseport

        def said(port: int) -> None:
            print(f"logtriage: liveness on http://{shown}:{port}/healthz", file=sys.stderr)

        return serve_reuseport(
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            recycle_growth=settings.worker_recycle_growth,
            recycle_after_s=settings.worker_recycle_after_s,
            health_port=settings.health_port,
            health_stall_s=settings.health_stall_s,
            on_health_port=said,
        )
    if settings.health_port is not None:
        print("logtriage: --health-port needs SO_REUSEPORT (Linux); serving without it", file=sys.stderr)
    from app.http.protocol import uvicorn_http

    uvicorn.run(
        "app.asgi:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        proxy_headers=True,
        timeout_graceful_shutdown=30,
        # request heads bounded (431), head timeout (408), connections per client and in all capped;
        # uvicorn's own worker processes (no SO_REUSEPORT) read the limits from the environment
        http=uvicorn_http(settings if settings.workers == 1 else None),
    )
    return 0


# --- db ----------------------------------------------------------------------------------------


def _move_schema(revision: str, *, down: bool) -> int:
    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        before, after = adm.move_schema(admin=admin, revision=revision, down=down)
    print(f"database {admin.url}: {before or 'empty'} -> {after or 'empty'}")
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    return _move_schema(args.revision, down=False)


def cmd_db_downgrade(args: argparse.Namespace) -> int:
    return _move_schema(args.revision, down=True)


def cmd_db_current(_args: argparse.Namespace) -> int:
    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        state = adm.schema_state(admin=admin)
    said = "up to date" if state.up_to_date else f"behind: run `logtriage db upgrade` (head {state.head})"
    print(f"{admin.url}: {state.current or 'empty'} ({said})")
    return 0 if state.up_to_date else 1


def cmd_db_gc(args: argparse.Namespace) -> int:
    """Delete blobs nothing refers to (rows and files), and stale staging files."""
    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        # files no row knows: at once unless a live server claims them (app.service.housekeeping)
        garbage = adm.collect_garbage(admin=admin, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {garbage.unreferenced} unreferenced blobs and {garbage.orphans} orphan blob files")
    return 0


# --- tokens ------------------------------------------------------------------------------------


def cmd_tokens_create(args: argparse.Namespace) -> int:
    from app.service import admin as adm

    scopes = list(dict.fromkeys(args.scope or ["ingest"]))
    expires = dt.datetime.now(dt.UTC) + args.expires_in if args.expires_in else None
    with adm.open_admin(settings=_settings()) as admin:
        adm.ensure_schema(admin=admin)
        row, secret = adm.create_token(admin=admin, name=args.name, scopes=scopes, expires_at=expires)
    summary = f"token {row.name!r} (id {row.id}, scopes: {' '.join(row.scopes)})"
    if args.quiet:
        print(secret)
        return 0
    print(secret)
    print(
        f"created {summary}{f', expires {expires:%Y-%m-%d}' if expires else ''}.\n"
        "Store it now: only its hash is kept. Use it as `Authorization: Bearer <token>` "
        "(or LOGTRIAGE_TOKEN for `logtriage submit`).",
        file=sys.stderr,
    )
    return 0


def cmd_tokens_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        adm.ensure_schema(admin=admin)
        rows: list[dict[str, Any]] = [asdict(t) for t in adm.list_tokens(admin=admin)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no tokens: the service runs open for loopback clients (`logtriage tokens create` to add one)")
        return 0
    for r in rows:
        state = "revoked" if r["revoked_at"] else "active"
        used = (r["last_used_at"] or "never")[:19]
        print(
            f"{r['id']:>4}  {r['name']:24} {r['prefix']}…  {' '.join(r['scopes']):18} {state:8} "
            f"last used {used}"
        )
    return 0


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    from app.service import admin as adm

    with adm.open_admin(settings=_settings()) as admin:
        name = adm.revoke_token(admin=admin, name_or_id=args.token)
    print(f"revoked token {name!r}")
    return 0


# --- submit ------------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    from app.client import (
        ACTION_EXIT,
        OutcomeOptions,
        SubmitOptions,
        dump_json,
        format_result,
        post_outcome,
        shell_lines,
        submit,
    )
    from app.errors import LogtriageError

    settings = _settings()
    url = args.url or settings.url
    token = args.token or (settings.token.get_secret_value() if settings.token else None)
    labels: dict[str, str] = {}
    for pair in args.label or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {pair!r}: write labels as key=value")
        labels[key] = value
    try:
        if not url:
            raise UsageError("no service URL: pass --url or set LOGTRIAGE_URL")
        opts = SubmitOptions(
            url=url,
            token=token,
            job_id=args.job_id,
            framework=args.framework,
            exit_code=args.exit_code,
            host=args.host,
            labels=labels,
            notify=args.notify,
            config=Path(args.config) if args.config else None,
            max_bytes=args.max_bytes,
            head_bytes=args.head_bytes,
            retries=args.retries,
            timeout=args.timeout,
            wait=args.wait,
            deadline=args.deadline,
            backoff=args.backoff,
        )
        if args.idempotency_key:
            opts.idempotency_key = args.idempotency_key
        if args.outcome:
            if args.files:
                raise UsageError("--outcome reports how an attempt ended: give no log files with it")
            if not args.job_id:
                raise UsageError("--outcome needs --job-id (the job whose attempt ended)")
            outcome = OutcomeOptions(
                job_id=args.job_id,
                status=args.outcome,
                action=args.did,
                attempt_id=args.attempt_id,
                analysis_id=args.analysis_id,
                started_at=args.started_at,
                excluded_hosts=[h for h in (args.excluded_hosts or "").split(",") if h],
                detail=args.detail,
            )
            got = post_outcome(outcome, opts)
            linked = (
                f"after analysis {got['analysis_id']}" if got.get("analysis_id") else "(no analysed failure)"
            )
            sys.stdout.write(
                dump_json(got) if args.json else f"logtriage: outcome {got['status']} {linked}\n"
            )
            return 0
        if not args.files:
            raise UsageError("give the log files to submit (or --outcome)")
        result = submit([Path(p) for p in args.files], opts)
    except LogtriageError as exc:
        print(
            f"logtriage: submit failed: {exc.detail} (the job's own exit status is unaffected)",
            file=sys.stderr,
        )
        return exc.exit_code if args.strict else 0
    except Exception as exc:  # a hook must never crash the job's epilogue
        print(f"logtriage: submit failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1 if args.strict else 0
    if args.shell:
        # stdout is for `eval`: the report goes to stderr
        sys.stderr.write(format_result(result))
        sys.stdout.write(shell_lines(result))
    else:
        sys.stdout.write(dump_json(result) if args.json else format_result(result))
    if result.get("status") == "failed" and args.strict:
        return 3  # the service refused the log (the reason is printed above)
    if args.action_exit and result.get("status") == "done":
        return ACTION_EXIT.get((result.get("action") or {}).get("decision", ""), 0)
    return 0


# --- retriage ----------------------------------------------------------------------------------


def cmd_retriage(args: argparse.Namespace) -> int:
    ray_options = None
    if args.ray:
        from app.service.retriage import RayOptions, import_ray

        import_ray(local=args.ray_address == "local")  # not installed: a one-line error before any work
        ray_options = RayOptions(
            address=args.ray_address, batch_size=args.ray_batch, workers=args.ray_workers
        )
    from app.service import admin as adm
    from app.service.retriage import change_report, retriage

    settings = _settings()
    if args.rules:
        settings = settings.model_copy(update={"rules_dir": Path(args.rules)})
    if args.engine:
        settings = settings.model_copy(update={"engine": args.engine})
    with adm.open_admin(settings=settings) as admin:
        adm.ensure_schema(admin=admin)
        ids = adm.retriage_candidates(
            admin=admin,
            since=args.since,
            until=args.until,
            failure_class=args.failure_class,
            limit=args.limit,
        )
        if not ids:
            print("no analyses to re-triage in that window")
            return 0
        where = " on Ray" if ray_options else ""
        print(
            f"re-triaging {len(ids)} analyses{where}{' (dry run)' if args.dry_run else ''}…", file=sys.stderr
        )
        results = retriage(
            db=admin.db, settings=settings, analysis_ids=ids, dry_run=args.dry_run, ray=ray_options
        )
    report = change_report(results, dry_run=args.dry_run)
    if args.json:
        print(json.dumps({"report": report, "analyses": [{"id": i, **c} for i, c in results]}, indent=2))
    else:
        print(report["text"])
    return 0


# --- registration ------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the service commands to the `logtriage` parser."""
    s = sub.add_parser(
        "serve",
        help="run the web service (REST API) on SQLite, no configuration needed",
        description="Migrate the database, then serve the API with uvicorn. Settings: LOGTRIAGE_* "
        "environment variables (docs/service.md).",
    )
    s.add_argument("--host", help="interface to bind (default 127.0.0.1; LOGTRIAGE_HOST)")
    s.add_argument("--port", type=int, help="TCP port (default 8000; LOGTRIAGE_PORT)")
    s.add_argument("--workers", type=int, help="uvicorn worker processes (default 1; LOGTRIAGE_WORKERS)")
    s.add_argument(
        "--health-port",
        type=int,
        metavar="PORT",
        help="answer GET /healthz on this port too, never queued behind uploads: for liveness probes "
        "(LOGTRIAGE_HEALTH_PORT)",
    )
    s.add_argument(
        "--wait-for-db",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for the database to come up (default: fail at once)",
    )
    s.set_defaults(func=cmd_serve)

    doc = sub.add_parser(
        "doctor",
        help="find and remove what a crash left (orphan blobs, stale staging files, interrupted analyses)",
    )
    doc.add_argument("--dry-run", action="store_true", help="report only")
    doc.set_defaults(func=cmd_doctor)

    d = sub.add_parser("db", help="database schema: upgrade, downgrade, current, gc")
    dsub = d.add_subparsers(dest="db_command", metavar="ACTION")
    du = dsub.add_parser("upgrade", help="migrate to the latest schema (or --revision)")
    du.add_argument("--revision", default="head")
    du.set_defaults(func=cmd_db_upgrade)
    dd = dsub.add_parser("downgrade", help="migrate down to REVISION (`base` = empty)")
    dd.add_argument("revision")
    dd.set_defaults(func=cmd_db_downgrade)
    dc = dsub.add_parser("current", help="show the schema revision (exit 1 when behind)")
    dc.set_defaults(func=cmd_db_current)
    dg = dsub.add_parser("gc", help="delete stored blobs no analysis refers to")
    dg.add_argument("--dry-run", action="store_true")
    dg.set_defaults(func=cmd_db_gc)

    t = sub.add_parser("tokens", help="API tokens: create, list, revoke")
    tsub = t.add_subparsers(dest="tokens_command", metavar="ACTION")
    tc = tsub.add_parser("create", help="create a token (printed once; only its hash is stored)")
    tc.add_argument("--name", required=True, help="a name to recognise it by, e.g. slurm-epilog")
    tc.add_argument(
        "--scope",
        action="append",
        choices=SCOPES,
        help="ingest (hooks), read, admin; repeat for several (default: ingest)",
    )
    tc.add_argument("--expires-in", type=_duration, help="e.g. 90d, 1y (default: never)")
    tc.add_argument("-q", "--quiet", action="store_true", help="print only the token")
    tc.set_defaults(func=cmd_tokens_create)
    tl = tsub.add_parser("list", help="list tokens (never their secrets)")
    tl.add_argument("--json", action="store_true")
    tl.set_defaults(func=cmd_tokens_list)
    tr = tsub.add_parser("revoke", help="revoke a token by name or id")
    tr.add_argument("token")
    tr.set_defaults(func=cmd_tokens_revoke)

    sm = sub.add_parser(
        "submit",
        help="post logs to a logtriage service (from a failed job's hook); never fails the job",
        description="Post logs (gzip, head+tail for huge files, retries) and print the root cause, the "
        "fix and the report URL. Exits 0 even when the service cannot be reached (use --strict).",
    )
    sm.add_argument("files", nargs="*", metavar="FILE", help="log files (plain, gzip or zstd)")
    sm.add_argument("--url", help="service base URL (LOGTRIAGE_URL)")
    sm.add_argument("--token", help="API token with the ingest scope (LOGTRIAGE_TOKEN)")
    sm.add_argument("--job-id")
    sm.add_argument("--framework", help="the job's framework (overrides detection)")
    sm.add_argument("--exit-code", type=int, help="the job's exit status (0 + fatal log = masked failure)")
    sm.add_argument("--host", default=os.uname().nodename, help="host the job ran on (default: this host)")
    sm.add_argument("--label", action="append", metavar="KEY=VALUE", help="free-form label; repeatable")
    sm.add_argument("--config", help="the job's config (YAML or launch script): patches become a diff")
    sm.add_argument(
        "--notify",
        metavar="CHANNEL_ID",
        help="Slack channel ID the service posts the diagnosis to (its bot must be in the channel)",
    )
    sm.add_argument(
        "--max-bytes",
        type=_size,
        default=256 << 20,
        help="per file: larger logs go as head + tail (default 256M)",
    )
    sm.add_argument("--head-bytes", type=_size, default=32 << 20, help="head kept of a cut log (default 32M)")
    sm.add_argument(
        "--deadline",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="give up retrying (429, 5xx, 507, no connection, an interrupted analysis) after this "
        "long in all (default 600); then exit 4 with --strict",
    )
    sm.add_argument(
        "--retries",
        type=int,
        default=None,
        help="at most this many retries in a row (default: as many as the deadline allows)",
    )
    sm.add_argument(
        "--backoff",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="first wait between attempts, doubling up to 60 s, with jitter; a Retry-After "
        "answer is waited instead (default 1)",
    )
    sm.add_argument(
        "--idempotency-key",
        help="key of this submission (default: a random one, the same for every retry); pass one "
        "that is stable for the job, e.g. $SLURM_JOB_ID-$SLURM_RESTART_COUNT, when the hook itself "
        "may run twice",
    )
    sm.add_argument("--timeout", type=float, default=60.0, help="seconds per attempt (default 60)")
    sm.add_argument(
        "--wait", type=float, default=120.0, help="seconds to wait for a slow analysis (default 120)"
    )
    sm.add_argument("--json", action="store_true", help="print the analysis JSON")
    sm.add_argument("--strict", action="store_true", help="exit non-zero when the submit fails")
    sm.add_argument(
        "--action-exit",
        action="store_true",
        help="exit with the analysis' decision: 10 retry, 11 retry_excluding, 12 fix_and_rerun, 13 stop, "
        "14 investigate; 0 when there is no analysis to act on (docs/hooks.md)",
    )
    sm.add_argument(
        "--shell",
        action="store_true",
        help="print LOGTRIAGE_DECISION=..., LOGTRIAGE_EXCLUDE_HOSTS=... for `eval` (report to stderr)",
    )
    og = sm.add_argument_group("outcomes: how the next attempt of a failed job ended (no FILE)")
    og.add_argument("--outcome", choices=("succeeded", "failed"), help="report this attempt's ending")
    og.add_argument(
        "--did",
        choices=("retry", "retry_excluding", "fix_and_rerun"),
        help="what the attempt was: a plain retry, a retry without some hosts, or a rerun after a fix "
        "(default: what the analysis advised)",
    )
    og.add_argument("--attempt-id", help="the scheduler's id of this attempt (e.g. $SLURM_JOB_ID)")
    og.add_argument("--analysis-id", help="the failure this attempt followed (default: the job's latest)")
    og.add_argument("--started-at", help="when this attempt started (ISO 8601)")
    og.add_argument("--excluded-hosts", metavar="H1,H2", help="hosts this attempt ran without")
    og.add_argument("--detail", help="a note stored with the outcome")
    sm.set_defaults(func=cmd_submit)

    r = sub.add_parser(
        "retriage",
        help="re-run stored analyses with the current rule library and report what changed",
    )
    r.add_argument("--since", type=_when, required=True, help="ISO date/time or an age: 7d, 24h")
    r.add_argument("--until", type=_when, help="ISO date/time or an age")
    r.add_argument(
        "--class", dest="failure_class", help="only analyses with this root-cause class (e.g. unknown)"
    )
    r.add_argument("--limit", type=int, help="at most this many analyses")
    r.add_argument("--dry-run", action="store_true", help="report the changes without storing them")
    r.add_argument("--json", action="store_true")
    r.add_argument("--rules", help="rule library directory (default: LOGTRIAGE_RULES_DIR or bundled)")
    r.add_argument("--engine", choices=["auto", "hyperscan", "regex"])
    r.add_argument(
        "--ray",
        action="store_true",
        help="run the re-triage on Ray (optional extra: pip install 'logtriage[ray]'); this process "
        "still owns the database",
    )
    r.add_argument(
        "--ray-address",
        default="auto",
        metavar="ADDR",
        help="auto (RAY_ADDRESS or the running cluster, default), local (start a private instance on "
        "127.0.0.1), ray://HOST:10001 (Ray Client) or HOST:PORT",
    )
    r.add_argument(
        "--ray-batch", type=_positive, default=8, metavar="N", help="analyses per Ray task (default 8)"
    )
    r.add_argument(
        "--ray-workers",
        type=_positive,
        metavar="N",
        help="Ray actors, each compiling the library once (default: the cluster's CPUs)",
    )
    r.set_defaults(func=cmd_retriage)
