"""A stored analysis as a Slack message (Block Kit): what the bot posts in a thread and what a
failed job's hook notification posts to a channel.

Root cause, who acts, confidence, the top patch as a code block, recurrence ("seen 4 times this
week, last on host X"), the suspect-host warning, a link to the full report and the feedback
buttons. Only the analysis resource is read, which is redacted before it is stored. Text from
the log is inserted as literal text: Slack's mrkdwn control characters (`&`, `<`, `>`) are
escaped, so a log line cannot mention `@channel`, link somewhere or break the layout, and
backticks cannot close a code block early. Slack's limits are kept with a visible cut and a
link to the rest: 50 blocks a message, 3,000 characters a section, 150 a header, 40,000 in the
fallback text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from app.render.action import headline

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_TEXT = 40_000
FEEDBACK_ACTIONS = ("feedback_correct", "feedback_wrong")


_MD_LINK = re.compile(r"(?<!\\)\[([^\]\n]{1,200})\]\((https?://[^)\s]{1,500})\)")
_MD_BOLD = re.compile(r"\*\*([^*\n]{1,300})\*\*")
_MD_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")


def mrkdwn(markdown: str) -> str:
    """A remediation text (Markdown, the rule's own words plus values from the log inserted as
    escaped literals) as Slack mrkdwn: links and bold of the rule's text converted, the escapes
    of inserted values undone only after that, so a value never becomes a link. Lines wrapped in
    the rule's source are joined (Slack shows every newline; a phone would show the wraps as
    ragged breaks mid-sentence) and list items get Slack's bullet."""
    out = escape(_unwrap(markdown))
    links: list[str] = []

    def link(m: re.Match[str]) -> str:
        links.append(f"<{m.group(2)}|{m.group(1)}>")
        return f"\x00{len(links) - 1}\x00"

    out = _MD_LINK.sub(link, out)
    out = _MD_BOLD.sub(r"*\1*", out)
    out = _MD_ESCAPED.sub(r"\1", out)
    return re.sub("\x00(\\d+)\x00", lambda m: links[int(m.group(1))], out)


_SOFT_BREAK = re.compile(r"[ \t]*\n(?![ \t]*(?:[-*+] |\d+[.)] |\n|$))[ \t]*")
_LIST_ITEM = re.compile(r"^([ \t]*)[-*+] ", re.M)


def _action(resource: dict[str, Any], report_url: str) -> list[dict[str, Any]]:
    """The job's action, one section: the decision in words, the reason, the history if any."""
    action = resource.get("action") or {}
    if not action.get("decision"):
        return []
    lines = [f"*The job:* {escape(headline(action))} (`{escape(str(action['decision']))}`)"]
    why = [str(w) for w in action.get("why") or []]
    if why:
        lines.append(escape(clip(why[0], 400)))
    if action.get("history"):
        lines.append(escape(clip(why[-1], 300)))
    return [_section("\n".join(lines), report_url)]


def _unwrap(markdown: str) -> str:
    """Markdown's soft line breaks as spaces, outside code fences; `- item` as `• item`."""
    parts = markdown.split("```")
    for i in range(0, len(parts), 2):  # even parts lie outside the fences
        text = parts[i]
        body = text.strip("\n")  # the line breaks next to a fence stay
        start = text.index(body) if body else 0
        unwrapped = _LIST_ITEM.sub(r"\1• ", _SOFT_BREAK.sub(" ", body))
        parts[i] = text[:start] + unwrapped + text[start + len(body) :]
    return "```".join(parts)


def escape(text: str) -> str:
    """Literal text in mrkdwn (Slack's own escaping: only these three are special)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int, more: str = "…") -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(more))] + more


def _code(text: str, limit: int, url: str) -> str:
    # ``` inside the patch would end the block: a zero-width joiner keeps it visible and inert
    body = escape(text).replace("```", "`\u200d``")
    tail = f"\n… (cut: the whole patch is in <{url}|the report>)"
    fence = 8  # the ``` fences and newlines
    if len(body) + fence > limit:
        body = body[: max(0, limit - fence - len(tail))] + tail
    return f"```\n{body}\n```"


def _section(text: str, url: str) -> dict[str, Any]:
    if len(text) > MAX_SECTION:
        tail = f" … <{url}|more in the report>"
        text = text[: MAX_SECTION - len(tail)] + tail
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def diagnosis(
    resource: dict[str, Any],
    *,
    report_url: str,
    who_acts: Callable[[str], str],
    feedback: bool = True,
    note: str | None = None,
    seen_before: tuple[int, str] | None = None,
) -> dict[str, Any]:
    """`{"text": fallback, "blocks": [...]}` for `chat.postMessage` / `chat.update`.

    `who_acts`: a kind's line from the class catalogue (`Library.kind(k).who`).
    `note` is mrkdwn the bot wrote itself (who gave feedback, a re-triage), never log text.
    `seen_before`: how many similar past failures, and the link to the first of them."""
    root = resource.get("root_cause")
    aid = str(resource.get("id", ""))
    blocks: list[dict[str, Any]] = []
    if root:
        title = str(root.get("title", "root cause"))
        blocks.append(
            {
                "type": "header",
                "text": {"type": "plain_text", "text": clip(title, MAX_HEADER), "emoji": False},
            }
        )
        kind = str(root.get("kind", ""))
        facts = [
            f"*{escape(str(root.get('failure_class', '')))}*",
            f"who acts: {escape(who_acts(kind))}",
            f"confidence {float(root.get('confidence', 0)):.2f}",
        ]
        fw = resource.get("framework") or {}
        if fw.get("name"):
            version = f" {escape(str(fw['version']))}" if fw.get("version") else ""
            facts.append(f"framework {escape(str(fw['name']))}{version}")
        if root.get("ranks"):
            facts.append("ranks " + escape(", ".join(str(r) for r in root["ranks"][:16])))
        if root.get("hosts"):
            facts.append("hosts " + escape(", ".join(str(h) for h in root["hosts"][:8])))
        blocks.append(_section(" · ".join(facts), report_url))
        ev = (root.get("evidence") or [])[:1]
        if ev:
            line = ev[0]
            where = escape(f"{line.get('file', '')}:{line.get('line', '')}")
            blocks.append(
                _section(f"{where}\n{_code(str(line.get('text', '')), 800, report_url)}", report_url)
            )
        blocks += _action(resource, report_url)
        remediation = str(root.get("remediation") or "").strip()
        if remediation:
            cut = clip(remediation, 1200, more=" …")
            blocks.append(_section(f"*What to do*\n{mrkdwn(cut)}", report_url))
        patches = root.get("patches") or []
        if patches:
            top = patches[0]
            why = escape(str(top.get("why", "")))
            more = f" (+{len(patches) - 1} more in the report)" if len(patches) > 1 else ""
            blocks.append(
                _section(
                    f"*The fix*{more}: {why}\n{_code(str(top.get('rendered', '')), 2400, report_url)}",
                    report_url,
                )
            )
    else:
        blocks.append(
            {
                "type": "header",
                "text": {"type": "plain_text", "text": "No known failure matched", "emoji": False},
            }
        )
        steps = resource.get("next_steps") or []
        possible = resource.get("possible_causes") or []
        lines = [
            f"• possibly *{escape(str(p.get('failure_class', '')))}*: {escape(str(p.get('title', '')))}"
            for p in possible[:3]
        ]
        lines += [f"• {escape(clip(str(s), 300))}" for s in steps[:4]]
        blocks.append(
            _section(
                "Nothing is guessed. " + ("Collect this next:\n" + "\n".join(lines) if lines else ""),
                report_url,
            )
        )
        blocks += _action(resource, report_url)
    rec = resource.get("recurrence") or {}
    context: list[str] = []
    if rec.get("total", 0) > 1 and rec.get("summary"):
        context.append(escape(str(rec["summary"])))
    suspects = resource.get("suspect_hosts") or []
    if suspects:
        names = ", ".join(escape(str(s.get("host", ""))) for s in suspects[:5])
        plural = "s" if len(suspects) > 1 else ""
        context.append(f":warning: suspect node{plural}: {names} (hardware faults in several jobs)")
    meta = resource.get("metadata") or {}
    if meta.get("job_id"):
        context.append(f"job {escape(str(meta['job_id']))}")
    if seen_before and seen_before[0] > 0:
        n, first = seen_before
        context.append(f"Seen before: {n} similar failure{'s' if n != 1 else ''} (<{first}|the first>)")
    if context:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": clip(" · ".join(context), MAX_SECTION)}],
            }
        )
    verdicts = [str(f.get("verdict")) for f in resource.get("feedback") or []]
    status: list[str] = []
    if resource.get("retriaged_at"):
        status.append(f"re-triaged {escape(str(resource['retriaged_at']))[:16].replace('T', ' ')} UTC")
    if verdicts:
        status.append(f"feedback: {verdicts.count('correct')} correct, {verdicts.count('wrong')} wrong")
    if note:
        status.append(note)
    if status:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": clip(" · ".join(status), MAX_SECTION)}],
            }
        )
    actions: list[dict[str, Any]] = [
        {
            "type": "button",
            "text": {"type": "plain_text", "text": "Full report"},
            "url": report_url,
            "action_id": "open_report",
        }
    ]
    if feedback:
        actions += [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Correct"},
                "style": "primary",
                "action_id": FEEDBACK_ACTIONS[0],
                "value": aid,
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Wrong"},
                "style": "danger",
                "action_id": FEEDBACK_ACTIONS[1],
                "value": aid,
            },
        ]
    blocks.append({"type": "actions", "block_id": f"analysis:{aid}", "elements": actions})
    blocks = blocks[: MAX_BLOCKS - 1] + blocks[-1:] if len(blocks) > MAX_BLOCKS else blocks
    if root:
        fallback = f"Root cause: {root.get('title', '')} [{root.get('failure_class', '')}] — {report_url}"
    else:
        fallback = f"No known failure matched — {report_url}"
    return {"text": clip(escape(fallback), MAX_TEXT), "blocks": blocks}


WRONG_VIEW = "feedback_wrong_modal"  # callback id of the modal that asks for the right class


def wrong_modal(
    *, analysis_id: str, channel: str, ts: str, title: str | None, classes: list[str]
) -> dict[str, Any]:
    """The modal a "Wrong" click opens: the right class (a select over the catalogue) and a
    comment; a labelled verdict is what the site's own evaluation and rule precision count."""
    import json as _json

    options = [{"text": {"type": "plain_text", "text": c[:75]}, "value": c} for c in classes[:100]]
    return {
        "type": "modal",
        "callback_id": WRONG_VIEW,
        "private_metadata": _json.dumps({"analysis_id": analysis_id, "channel": channel, "ts": ts}),
        "title": {"type": "plain_text", "text": "Not the root cause"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"The report said: *{_esc(title or 'no named cause')}*. What was it?",
                },
            },
            {
                "type": "input",
                "block_id": "correct_class",
                "optional": True,
                "label": {"type": "plain_text", "text": "The right class"},
                "element": {
                    "type": "static_select",
                    "action_id": "value",
                    "placeholder": {"type": "plain_text", "text": "Pick a class"},
                    "options": options,
                },
            },
            {
                "type": "input",
                "block_id": "comment",
                "optional": True,
                "label": {"type": "plain_text", "text": "What happened (optional)"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "value",
                    "multiline": True,
                    "max_length": 2000,
                },
            },
        ],
    }


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
