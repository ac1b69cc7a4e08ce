"""Markdown to HTML for remediation texts: the small subset rules are written in, escape first.

Rules use paragraphs, `-` lists whose items wrap onto indented continuation lines, `code`,
**bold** and links. Everything is HTML-escaped before any tag is added, so rule text (or a
capture interpolated into it) can never inject markup.
"""

from __future__ import annotations

import re

import markupsafe

_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")
_EM = re.compile(r"(?<![*\w])\*([^*\s][^*\n]*)\*(?![*\w])")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_ITEM = re.compile(r"^\s{0,3}(?:[-*]|\d+\.)\s+(.*)$")


_ESCAPED = re.compile(r"\\([\\`*\[\]])")
_HELD = re.compile("\x00(\\d+)\x00")


def inline(text: str) -> str:
    """Escaped text with `code`, **bold**, *emphasis* and http(s) links. A backslash-escaped
    character (how values from the log are inserted) stays that literal character."""
    held: list[str] = []

    def hold(m: re.Match[str]) -> str:
        held.append(m.group(1))
        return f"\x00{len(held) - 1}\x00"

    out = str(markupsafe.escape(_ESCAPED.sub(hold, text.replace("\x00", ""))))
    out = _CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    out = _EM.sub(r"<em>\1</em>", out)
    out = _LINK.sub(r'<a href="\2" rel="noopener">\1</a>', out)
    return _HELD.sub(lambda m: str(markupsafe.escape(held[int(m.group(1))])), out)


def markdown_block(text: str) -> markupsafe.Markup:
    blocks: list[str] = []
    para: list[str] = []
    items: list[list[str]] = []
    fence: list[str] | None = None

    def flush() -> None:
        if para:
            blocks.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()
        if items:
            blocks.append("<ul>" + "".join("<li>" + inline(" ".join(i)) + "</li>" for i in items) + "</ul>")
            items.clear()

    for line in text.splitlines():
        if fence is not None:
            if line.strip().startswith("```"):
                blocks.append("<pre><code>" + str(markupsafe.escape("\n".join(fence))) + "</code></pre>")
                fence = None
            else:
                fence.append(line)
            continue
        if line.strip().startswith("```"):
            flush()
            fence = []
            continue
        if not line.strip():
            flush()
            continue
        m = _ITEM.match(line)
        if m:
            if para:
                flush()
            items.append([m.group(1).strip()])
        elif items and line.startswith((" ", "\t")):
            items[-1].append(line.strip())  # an item wrapped onto the next line
        else:
            if items:
                flush()
            para.append(line.strip())
    if fence is not None:
        blocks.append("<pre><code>" + str(markupsafe.escape("\n".join(fence))) + "</code></pre>")
    flush()
    return markupsafe.Markup("\n".join(blocks))
