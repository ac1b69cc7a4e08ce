"""The Slack bot: Bolt listeners over the service's own operations.

One `SlackBot` per server process, built in the app's lifespan when the bot token is set. The
same listeners answer Events API requests on `/slack/events` (Bolt checks the signature and its
5-minute replay window) and, with an app token, Socket Mode. Bolt acknowledges first and runs
the listener after the ack (`process_before_response=False`), so Slack gets its answer within
its 3 seconds however long the analysis takes.

What reaches the bot: a log file shared in a channel it is in or in a DM, a mention or a DM with
a pasted log, the `/triage` command, the "Triage this" message shortcut, the feedback buttons,
and the hooks' `notify` channel. Each is claimed once in the database (the event id, and the
message's channel and ts), so Slack's retries, a second worker or a restart never answer twice.
Everything posted comes from the stored analysis, which is redacted before it is stored; the
bot's own error messages name files by their redacted names.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.engine.pipeline.redact import redact_text
from app.errors import (
    AuthError,
    InputError,
    LogtriageError,
    PayloadTooLargeError,
    SlackError,
    UnsupportedMediaError,
)
from app.service import chat, learn, ops
from app.service.access import Principal
from app.service.context import ServiceContext
from app.service.jobs import InputFile, ScanJob
from app.service.metadata import JobMeta
from app.slack import CHANNEL_ID, blocks, verify, webapi

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp
    from starlette.requests import Request
    from starlette.responses import Response

    from app.settings import Settings

log = logging.getLogger("logtriage.slack")

MAX_REQUEST_BYTES = 1 << 20  # Slack's payloads are a few KB; a bigger one is not from Slack
EVENT_MEMORY = dt.timedelta(days=2)  # Slack retries a delivery for minutes; ids older are forgotten
PRUNE_EVERY = 500  # claims between two prunes of old event ids
SIMILAR_SHOWN = 20  # similar past failures counted for the reply
MIN_TEXT = 40  # a pasted text shorter than this is a question, not a log
SHORTCUT_ID = "triage_message"
COMMAND = "/triage"
CONFIG_SUFFIXES = (".yaml", ".yml")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".zst", ".zstd", ".json", ".jsonl", ".trace")
LOG_MIME = (
    "text/",
    "application/gzip",
    "application/x-gzip",
    "application/zstd",
    "application/octet-stream",
    "application/json",
    "application/x-ndjson",
)
ANALYSIS_REF = re.compile(r"(?:/analyses/|^\s*)(?P<id>[0-9A-HJKMNP-TV-Z]{26})(?![0-9A-Z])")
CODE_BLOCK = re.compile(r"```(?P<body>.*?)```", re.S)
MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
HELP = (
    "Share a failed job's log (a file, gzip or zstd too) or paste its traceback in a code block, "
    "and I answer with the root cause and the fix. `/triage <pasted log>` works anywhere, "
    "`/triage <analysis link>` posts a stored diagnosis, and \u201cTriage this\u201d on a message's "
    "menu triages that message."
)


def slack_text(raw: str) -> str:
    """A message's text as the user typed it: mentions dropped, Slack's escapes undone, the
    code blocks alone when there are any (the log is in them, the prose around it is not)."""
    text = MENTION.sub("", raw or "")
    bodies = [m.group("body").strip("\n") for m in CODE_BLOCK.finditer(text)]
    if bodies:
        text = "\n".join(bodies)
    return html.unescape(text).strip()


def likely_log(file: dict[str, Any]) -> bool:
    """Files worth a look when nobody asked (a share in a channel): text, archives, log names."""
    name = str(file.get("name") or "").lower()
    mime = str(file.get("mimetype") or "")
    return name.endswith(LOG_SUFFIXES) or mime.startswith(LOG_MIME) or file.get("filetype") == "text"


def slack_principal(user: str | None) -> Principal:
    # everyone in the workspace who can reach the bot may triage and read: the channel is the team
    return Principal(
        token_id=None, name=f"slack:{user or '?'}", scopes=frozenset({"ingest", "read"}), via="slack"
    )


class SlackBot:
    """The Bolt app, its Web API client and the operations its listeners run."""

    def __init__(self, *, ctx: ServiceContext, settings: Settings) -> None:
        from slack_bolt.async_app import AsyncApp

        self.ctx = ctx
        self.settings = settings
        self.client = webapi.make_client(settings)
        self.stats: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._claims = 0
        self._socket: Any = None
        secret = settings.slack_signing_secret
        self.app: AsyncApp = AsyncApp(
            client=self.client,
            signing_secret=secret.get_secret_value() if secret else "",
            # Socket Mode alone has no signing secret: its requests come over the app's own socket
            request_verification_enabled=secret is not None,
            process_before_response=False,
            logger=logging.getLogger("logtriage.slack.bolt"),
        )
        self._register(self.app)

    # --- edges ---------------------------------------------------------------------------------

    @property
    def default_base(self) -> str:
        s = self.settings
        return (s.public_url or f"http://{s.host}:{s.port}").rstrip("/")

    async def handle(self, request: Request, *, base: str) -> Response:
        """An Events API / interactivity / slash command request, verified and dispatched."""
        from slack_bolt.adapter.starlette.async_handler import to_async_bolt_request, to_starlette_response

        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_REQUEST_BYTES:
            raise PayloadTooLargeError("a Slack request is a few KB; this one is over 1 MiB")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_REQUEST_BYTES:
                raise PayloadTooLargeError("a Slack request is a few KB; this one is over 1 MiB")
        raw = bytes(body)
        # the signature first (401, whatever the body), then the shape (400): Bolt raised on
        # bodies Slack never sends, which were 500s
        secret = self.settings.slack_signing_secret
        verify.check_signature(request.headers, raw, secret=secret.get_secret_value() if secret else "")
        verify.check_shape(request.headers.get("content-type", ""), raw)
        bolt_request = to_async_bolt_request(request, raw, {"logtriage_base": base})
        response = await self.app.async_dispatch(bolt_request)
        if response.status == 401:
            raise AuthError("Slack request signature missing, invalid or older than 5 minutes")
        return to_starlette_response(response)

    async def start_socket_mode(self) -> None:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        assert self.settings.slack_app_token is not None
        self._socket = AsyncSocketModeHandler(self.app, self.settings.slack_app_token.get_secret_value())
        await self._socket.connect_async()
        log.info("Slack Socket Mode connected")

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close_async()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Work after the answer (a hook's notification, a message update), tracked so it is
        neither collected mid-flight nor left running at shutdown; it never raises out."""

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats["errors"] += 1
                log.exception("Slack: %s failed", name)

        task = asyncio.create_task(guarded(), name=f"slack-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- deduplication -------------------------------------------------------------------------

    async def claim(self, *keys: str) -> bool:
        """True when every key is new (then they are all taken); False on a repeat of any."""

        first = await asyncio.to_thread(chat.claim_events, self.ctx, keys=keys)
        self._claims += 1
        if self._claims % PRUNE_EVERY == 1:
            await asyncio.to_thread(self.prune)
        return first

    def prune(self) -> int:
        return chat.prune_events(self.ctx, before=dt.datetime.now(dt.UTC) - EVENT_MEMORY)

    # --- listeners -----------------------------------------------------------------------------

    def _register(self, app: AsyncApp) -> None:
        app.event("message")(self._on_message)
        app.event("app_mention")(self._on_mention)
        app.command(COMMAND)(self._on_command)
        app.shortcut(SHORTCUT_ID)(self._on_shortcut)
        app.action(blocks.FEEDBACK_ACTIONS[0])(self._on_feedback)
        app.action(blocks.FEEDBACK_ACTIONS[1])(self._on_feedback)
        app.action("open_report")(self._on_link)
        app.view(blocks.WRONG_VIEW)(self._on_wrong_submitted)

    def _base(self, context: Any) -> str:
        # a request's base is "" when its Host is not trusted for links (app.http.hosts)
        return str(context.get("logtriage_base") or self.default_base).rstrip("/")

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        subtype = event.get("subtype")
        if subtype not in (None, "file_share"):
            return  # edits, joins, deletions, the bot's own posts
        files = event.get("files") or []
        direct = event.get("channel_type") == "im"
        if event.get("bot_id") and not files:
            return  # other bots' chatter; an alert bot's attached log is still read
        if not direct:
            # in a channel: file shares only (a mention comes as app_mention), and only logs
            files = [f for f in files if likely_log(f)]
            if not files:
                return
        await self._triage_event(body, event, context, files=files, explicit=direct)

    async def _on_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        await self._triage_event(body, event, context, files=event.get("files") or [], explicit=True)

    async def _triage_event(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        context: Any,
        *,
        files: list[dict[str, Any]],
        explicit: bool,
    ) -> None:
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        keys = [f"msg:{channel}:{ts}"]  # a file share with a mention comes twice: message + app_mention
        if body.get("event_id"):
            keys.insert(0, f"event:{body['event_id']}")
        self.stats["events"] += 1
        if not await self.claim(*keys):
            self.stats["duplicates"] += 1
            return
        text = slack_text(str(event.get("text") or ""))
        if not files and len(text) < MIN_TEXT:
            if explicit:
                await self._post_text(channel, thread_ts=event.get("thread_ts") or ts, text=HELP)
            self.stats["handled"] += 1
            return
        await self._run(
            channel=channel,
            user=event.get("user"),
            message_ts=ts,
            thread_ts=event.get("thread_ts") or ts,
            base=self._base(context),
            work=lambda spool: self._job_from(files=files, text=text, spool=spool),
        )

    async def _on_command(
        self, ack: Callable[..., Awaitable[None]], command: dict[str, Any], context: Any
    ) -> None:
        text = slack_text(str(command.get("text") or ""))
        channel, user = str(command.get("channel_id", "")), command.get("user_id")
        ref = ANALYSIS_REF.search(text) if len(text) < 300 else None
        if not text:
            await ack(text=HELP)
            return
        await ack(text="Triaging\u2026 the diagnosis follows here.")
        self.stats["events"] += 1
        base = self._base(context)
        if ref is not None:
            await self._guarded(
                channel, user, lambda: self._post_stored(ref.group("id"), channel, user, base)
            )
            return
        await self._run(
            channel=channel,
            user=user,
            message_ts=None,
            thread_ts=None,
            base=base,
            work=lambda spool: self._job_from(files=[], text=text, spool=spool),
        )

    async def _on_shortcut(
        self, ack: Callable[..., Awaitable[None]], shortcut: dict[str, Any], context: Any
    ) -> None:
        await ack()
        message = shortcut.get("message") or {}
        channel = str((shortcut.get("channel") or {}).get("id", ""))
        user = (shortcut.get("user") or {}).get("id")
        files = message.get("files") or []
        text = slack_text(str(message.get("text") or ""))
        self.stats["events"] += 1
        if not files and len(text) < MIN_TEXT:
            await self._ephemeral(channel, user, "That message holds no log to triage. " + HELP)
            self.stats["handled"] += 1
            return
        ts = str(message.get("ts", ""))
        await self._run(
            channel=channel,
            user=user,
            message_ts=ts,
            thread_ts=message.get("thread_ts") or ts,
            base=self._base(context),
            work=lambda spool: self._job_from(files=files, text=text, spool=spool),
        )

    async def _on_feedback(
        self, ack: Callable[..., Awaitable[None]], body: dict[str, Any], action: dict[str, Any], context: Any
    ) -> None:
        await ack()
        verdict = "correct" if action.get("action_id") == blocks.FEEDBACK_ACTIONS[0] else "wrong"
        analysis_id = str(action.get("value", ""))
        user = (body.get("user") or {}).get("id")
        channel = str((body.get("channel") or {}).get("id", ""))
        ts = str((body.get("container") or {}).get("message_ts", ""))
        if (
            verdict == "wrong"
            and body.get("trigger_id")
            and await self._ask_right_class(
                trigger_id=str(body["trigger_id"]), analysis_id=analysis_id, channel=channel, ts=ts
            )
        ):
            return  # the modal's submission records the verdict, with the class

        async def work() -> None:
            await asyncio.to_thread(
                ops.record_feedback,
                self.ctx,
                analysis_id=analysis_id,
                verdict=verdict,
                correct_class=None,
                comment=None,
                principal=slack_principal(user),
            )
            self.stats["feedback"] += 1
            hint = "" if verdict == "correct" else " (the report page takes the right class)"
            await self.refresh(
                analysis_id=analysis_id,
                base=self._base(context),
                note=f"marked {verdict} by <@{user}>{hint}",
                also=(channel, ts),
            )

        await self._guarded(channel, user, work)

    async def _ask_right_class(self, *, trigger_id: str, analysis_id: str, channel: str, ts: str) -> bool:
        """Open the modal that asks for the right class; False when it cannot be opened (the
        verdict is then recorded without a class, as before)."""
        try:
            title = await asyncio.to_thread(self._root_title, analysis_id)
            classes = sorted(c for c in self.ctx.library.classes if c != "unknown")
            view = blocks.wrong_modal(
                analysis_id=analysis_id, channel=channel, ts=ts, title=title, classes=classes
            )
            await self.client.views_open(trigger_id=trigger_id, view=view)
            return True
        except Exception as exc:  # a Slack refusal or an unknown analysis: fall back
            log.info("Slack: no modal for the verdict (%s); recorded without a class", _api_error(exc))
            return False

    def _root_title(self, analysis_id: str) -> str | None:
        return ops.root_title(self.ctx, analysis_id=analysis_id)

    async def _on_wrong_submitted(
        self, ack: Callable[..., Awaitable[None]], body: dict[str, Any], view: dict[str, Any], context: Any
    ) -> None:
        await ack()
        meta = json.loads(view.get("private_metadata") or "{}")
        values = (view.get("state") or {}).get("values") or {}
        picked = ((values.get("correct_class") or {}).get("value") or {}).get("selected_option") or {}
        comment = ((values.get("comment") or {}).get("value") or {}).get("value")
        user = (body.get("user") or {}).get("id")
        analysis_id = str(meta.get("analysis_id", ""))
        channel, ts = str(meta.get("channel", "")), str(meta.get("ts", ""))
        cls = picked.get("value")

        async def work() -> None:
            await asyncio.to_thread(
                ops.record_feedback,
                self.ctx,
                analysis_id=analysis_id,
                verdict="wrong",
                correct_class=cls or None,
                comment=comment or None,
                principal=slack_principal(user),
            )
            self.stats["feedback"] += 1
            note = f"marked wrong by <@{user}>" + (f" (it was {cls})" if cls else "")
            await self.refresh(
                analysis_id=analysis_id, base=self._base(context), note=note, also=(channel, ts)
            )

        await self._guarded(channel, user, work)

    async def _on_link(self, ack: Callable[..., Awaitable[None]]) -> None:
        await ack()  # a URL button: Slack opens the link; the click still needs its answer

    # --- operations ----------------------------------------------------------------------------

    async def _guarded(self, channel: str, user: str | None, work: Callable[[], Awaitable[None]]) -> bool:
        """Run `work`; a failure is told to the user who asked, never raised into Bolt."""
        try:
            await work()
            return True
        except LogtriageError as exc:
            self.stats["refused"] += 1
            await self._ephemeral(channel, user, f"{exc.title}: {redact_text(exc.detail)}")
        except Exception:
            self.stats["errors"] += 1
            log.exception("Slack: request failed")
            await self._ephemeral(
                channel, user, "Something went wrong on the logtriage side; the server log has it."
            )
        return False

    async def _run(
        self,
        *,
        channel: str,
        user: str | None,
        message_ts: str | None,
        thread_ts: str | None,
        base: str,
        work: Callable[[Path], Awaitable[ScanJob]],
    ) -> None:
        """Triage what a message or command carries and answer in its thread, with reactions on
        the message for progress (eyes while working, then a check, a question mark or an x)."""
        started = time.perf_counter()
        if message_ts:
            await self._react(channel, message_ts, add="eyes")
        outcome = "x"

        async def analyse() -> None:
            nonlocal outcome
            with ops.staged_upload(self.ctx) as staging:
                job = await work(staging.path)
                submission = await ops.submit(
                    self.ctx,
                    job=job,
                    staging=staging,
                    meta=JobMeta(source="slack", labels={"slack_channel": channel}),
                    principal=slack_principal(user),
                    idempotency_key=None,
                    request_digest="slack",
                    wait=None,
                    client=f"slack:{user}",
                )
            res = await asyncio.to_thread(ops.submission_resource, self.ctx, submission=submission, base=base)
            await self.post_analysis(
                res, channel=channel, thread_ts=thread_ts, base=base, purpose="reply", user=user
            )
            outcome = "white_check_mark" if res.get("root_cause") else "grey_question"

        ok = await self._guarded(channel, user, analyse)
        if message_ts:
            await self._react(channel, message_ts, remove="eyes", add=outcome if ok else "x")
        self.stats["handled"] += 1
        log.info("Slack: answered in %.0f ms", (time.perf_counter() - started) * 1000)

    async def _job_from(self, *, files: list[dict[str, Any]], text: str, spool: Path) -> ScanJob:
        """The scan job of a message: its files downloaded into the spool, else its text."""
        if not files:
            return ScanJob(
                files=(InputFile("slack-message.txt", str(spool / "message.txt"), data=text.encode()),)
            )
        logs: list[InputFile] = []
        config: InputFile | None = None
        for i, ref in enumerate(files[:20]):
            info = ref
            if ref.get("id"):
                try:
                    info = (await self.client.files_info(file=ref["id"]))["file"]
                except Exception as exc:
                    raise SlackError(
                        f"files.info failed: {_api_error(exc)} (does the bot have `files:read`?)"
                    ) from None
            webapi.check_file(info, max_bytes=self.settings.slack_max_file_bytes)
            url = info.get("url_private_download") or info.get("url_private")
            if not url:
                raise InputError("Slack gave no download address for the file")
            name = redact_text(str(info.get("name") or f"file-{i}"))[:200]
            dest = spool / f"{i}.part"
            await webapi.download(
                str(url), settings=self.settings, dest=dest, max_bytes=self.settings.slack_max_file_bytes
            )
            item = InputFile(name, str(dest))
            if name.lower().endswith(CONFIG_SUFFIXES) and len(files) > 1 and config is None:
                config = item  # the job's own config beside its log: patches use its values
            else:
                logs.append(item)
        if not logs:
            raise UnsupportedMediaError("only a config file was shared; share the job's log with it")
        return ScanJob(files=tuple(logs), config=config)

    async def _post_stored(self, analysis_id: str, channel: str, user: str | None, base: str) -> None:
        res = await asyncio.to_thread(
            ops.load_resource, self.ctx, analysis_id=analysis_id, base=base, principal=slack_principal(user)
        )
        if res.get("status") != "done":
            await self._ephemeral(
                channel, user, f"Analysis {analysis_id} is {res.get('status')}; try again shortly."
            )
            return
        await self.post_analysis(res, channel=channel, thread_ts=None, base=base, purpose="reply", user=user)

    async def post_analysis(
        self,
        res: dict[str, Any],
        *,
        channel: str,
        thread_ts: str | None,
        base: str,
        purpose: str,
        user: str | None = None,
        fingerprint: str | None = None,
    ) -> str | None:
        """Post the diagnosis; remember the message so feedback and re-triage update it."""
        seen = await asyncio.to_thread(self._seen_before, res["id"], base)
        message = blocks.diagnosis(
            res, report_url=f"{base}/analyses/{res['id']}", who_acts=self._who_acts, seen_before=seen
        )
        try:
            sent = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, unfurl_links=False, unfurl_media=False, **message
            )
        except Exception as exc:
            error = _api_error(exc)
            if user and error in ("not_in_channel", "channel_not_found"):
                # a command in a channel the bot is not in: the user still gets the answer
                await self._ephemeral(channel, user, message["text"], blocks=message["blocks"])
                return None
            raise SlackError(f"chat.postMessage failed: {error}") from None
        ts = str(sent.get("ts"))
        where = str(sent.get("channel") or channel)
        await asyncio.to_thread(self._remember, res["id"], where, ts, thread_ts, purpose, fingerprint)
        self.stats["posts"] += 1
        return ts

    def _seen_before(self, analysis_id: str, base: str) -> tuple[int, str] | None:
        """Similar past failures (issue 23): how many, and a link to the earliest of them."""
        try:
            found = learn.similar_failures(
                self.ctx, analysis_id=analysis_id, principal=slack_principal(None), limit=SIMILAR_SHOWN
            )
        except LogtriageError as exc:  # an extra line: the diagnosis is posted without it
            log.warning("Slack: similar failures of %s: %s", analysis_id, exc)
            return None
        if not found:
            return None
        first = min(found, key=lambda x: x.created_at)
        return len(found), f"{base}/analyses/{first.analysis_id}"

    def _remember(
        self, analysis_id: str, channel: str, ts: str, thread_ts: str | None, purpose: str, fp: str | None
    ) -> None:
        chat.message_posted(
            self.ctx,
            analysis_id=analysis_id,
            channel=channel,
            ts=ts,
            thread_ts=thread_ts,
            purpose=purpose,
            fingerprint=fp,
        )

    async def refresh(
        self, *, analysis_id: str, base: str, note: str | None = None, also: tuple[str, str] | None = None
    ) -> int:
        """Update every message the bot posted about an analysis in place (after feedback or a
        re-triage changed what it says); returns how many were updated."""

        def load() -> tuple[dict[str, Any], list[tuple[str, str]]]:
            res = ops.load_resource(self.ctx, analysis_id=analysis_id, base=base, principal=None)
            return res, chat.messages_of(self.ctx, analysis_id=analysis_id)

        res, where = await asyncio.to_thread(load)
        if also and also[0] and also[1] and also not in where:
            where.append(also)
        seen = await asyncio.to_thread(self._seen_before, analysis_id, base)
        message = blocks.diagnosis(
            res,
            report_url=f"{base}/analyses/{analysis_id}",
            who_acts=self._who_acts,
            note=note,
            seen_before=seen,
        )
        for channel, ts in where:
            try:
                await self.client.chat_update(channel=channel, ts=ts, **message)
            except Exception as exc:
                log.warning("Slack: chat.update %s/%s failed: %s", channel, ts, _api_error(exc))
                continue
            self.stats["updates"] += 1
        return len(where)

    # --- hook notifications (`app.service.notify.Notifier`) ---------------------------------------

    def valid_channel(self, channel: str) -> str | None:
        if CHANNEL_ID.match(channel):
            return None
        return (
            f"{channel[:40]!r} is not a Slack channel ID (C0123ABCD: the channel's details "
            "show it); names change, IDs do not"
        )

    def analysis_changed(self, *, analysis_id: str, base: str, note: str) -> None:
        self.spawn(self.refresh(analysis_id=analysis_id, base=base, note=note), name="refresh")

    def hosts_flagged(self, *, analysis_id: str, hosts: list[dict[str, Any]]) -> None:
        channel = self.settings.slack_hosts_channel
        if channel:
            self.spawn(self._post_hosts(channel, analysis_id=analysis_id, hosts=hosts), name="hosts")

    async def _post_hosts(self, channel: str, *, analysis_id: str, hosts: list[dict[str, Any]]) -> None:
        base = self.default_base.rstrip("/")
        s = self.settings
        lines = []
        for h in hosts:
            name = blocks.escape(str(h["host"]))
            classes = blocks.escape(", ".join(h.get("classes") or []))
            lines.append(
                f":warning: *{name}*: hardware failures in {h['jobs']} jobs within {s.recurrence_days} days "
                f"({classes}); leave it out (`--exclude={name}`) and have it checked"
            )
        lines.append(
            f"Latest: <{base}/analyses/{analysis_id}|the report> · the list: "
            f"`GET {base}/api/v1/hosts/exclude` · after a repair: `POST {base}/api/v1/hosts/HOST/clear`"
        )
        await self._post_text(channel, thread_ts=None, text="\n".join(lines))

    def notify_later(
        self, *, analysis_id: str, channel: str, base: str, pending: asyncio.Task[Any] | None
    ) -> None:
        self.spawn(
            self.notify(analysis_id=analysis_id, channel=channel, base=base, pending=pending), name="notify"
        )

    async def notify(
        self, *, analysis_id: str, channel: str, base: str, pending: asyncio.Task[Any] | None = None
    ) -> str:
        """Post a hook's analysis to a channel; a repeat of a fingerprint posted there within the
        window becomes one line in that post's thread. Returns `notify`, `repeat` or `failed`."""
        base = (base or self.default_base).rstrip("/")  # "": the hook's Host is not trusted
        if pending is not None and not pending.done():
            await asyncio.wait({pending})
        res = await asyncio.to_thread(
            ops.load_resource, self.ctx, analysis_id=analysis_id, base=base, principal=None
        )
        if res.get("status") != "done":
            detail = redact_text(str((res.get("error") or {}).get("detail", res.get("status"))))
            await self._post_text(
                channel,
                thread_ts=None,
                text=f"logtriage could not analyse job {_job(res)}: {blocks.escape(detail)}",
            )
            return "failed"
        root = res.get("root_cause") or {}
        fp = str(root.get("fingerprint") or (res.get("recurrence") or {}).get("fingerprint") or "") or None
        window = self.settings.slack_repeat_minutes
        if not fp or window <= 0:
            await self.post_analysis(res, channel=channel, thread_ts=None, base=base, purpose="notify")
            return "notify"
        lock = self._locks.setdefault((channel, fp), asyncio.Lock())
        async with lock:  # two hooks of one failure at once: the second waits and threads
            since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=window)

            found = await asyncio.to_thread(
                chat.thread_head, self.ctx, channel=channel, fingerprint=fp, since=since
            )
            if found is None:
                await self.post_analysis(
                    res, channel=channel, thread_ts=None, base=base, purpose="notify", fingerprint=fp
                )
                return "notify"
            where, ts = found
            host = (res.get("metadata") or {}).get("host")
            line = f"Again on job {_job(res)}" + (f" (host {blocks.escape(str(host))})" if host else "")
            line += f": <{base}/analyses/{res['id']}|report>"
            sent = await self.client.chat_postMessage(
                channel=where, thread_ts=ts, text=line, unfurl_links=False
            )
            await asyncio.to_thread(self._remember, res["id"], where, str(sent.get("ts")), ts, "repeat", fp)
            self.stats["repeats"] += 1
            return "repeat"

    # --- small Web API helpers -----------------------------------------------------------------

    async def _post_text(self, channel: str, *, thread_ts: str | None, text: str) -> None:
        try:
            await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=text, unfurl_links=False
            )
        except Exception as exc:
            log.warning("Slack: chat.postMessage failed: %s", _api_error(exc))

    async def _ephemeral(
        self, channel: str, user: str | None, text: str, blocks: list[Any] | None = None
    ) -> None:
        if not user or not channel:
            return
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, blocks=blocks)
        except Exception as exc:
            log.warning("Slack: chat.postEphemeral failed: %s", _api_error(exc))

    def _who_acts(self, kind: str) -> str:
        return self.ctx.library.kind(kind).who

    async def _react(
        self, channel: str, ts: str, *, add: str | None = None, remove: str | None = None
    ) -> None:
        # progress marks only: a missing `reactions:write` scope must not stop the answer
        for method, name in (("reactions_remove", remove), ("reactions_add", add)):
            if not name:
                continue
            try:
                await getattr(self.client, method)(channel=channel, timestamp=ts, name=name)
            except Exception as exc:
                log.debug("Slack: %s %s failed: %s", method, name, _api_error(exc))


def _api_error(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            return str(response.get("error") or response.status_code)
        except Exception:
            pass
    return type(exc).__name__


def _job(res: dict[str, Any]) -> str:
    return blocks.escape(str((res.get("metadata") or {}).get("job_id") or res.get("id")))
