"""Draw a Block Kit message the way Slack lays it out (header, sections, code blocks,
context lines, buttons) and screenshot it with Debian's Chromium, for the docs.

    python docs/slack/render_preview.py docs/slack/example-reply.json docs/img/slack-reply.png

An approximation of Slack's client for people reading the docs, not Slack itself: the JSON
beside it is what the bot really posted.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

CSS = """
body { font: 15px/1.46 -apple-system, 'Segoe UI', 'Helvetica Neue', Arial, sans-serif; margin: 0;
       background: #fff; color: #1d1c1d; max-width: 760px; }
.msg { display: flex; padding: 12px 20px; }
.avatar { width: 36px; height: 36px; border-radius: 6px; background: #1f2937; color: #fff;
          font-weight: 700; display: flex; align-items: center; justify-content: center;
          margin-right: 10px; flex: none; }
.name { font-weight: 900; }
.app { font-size: 10px; background: #ddd; border-radius: 2px; padding: 1px 3px; margin: 0 4px; }
.time { color: #616061; font-size: 12px; }
h3 { font-size: 18px; margin: 6px 0; } .section { margin: 6px 0; white-space: pre-wrap; }
pre { background: #f8f8f8; border: 1px solid #ddd; border-radius: 4px; padding: 8px; margin: 4px 0;
      font: 12px/1.5 Monaco, Menlo, Consolas, monospace; white-space: pre-wrap; }
code { background: #f4f4f4; border: 1px solid #e0e0e0; border-radius: 3px; color: #c01343;
       font: 12px Monaco, Menlo, monospace; padding: 0 2px; }
.context { color: #616061; font-size: 12px; margin: 6px 0; } a { color: #1264a3; text-decoration: none; }
.button { display: inline-block; border: 1px solid #bbb; border-radius: 4px; padding: 3px 12px;
          margin: 6px 6px 0 0; font-weight: 700; font-size: 13px; }
.primary { background: #007a5a; color: #fff; border-color: #007a5a; }
.danger { color: #e01e5a; border-color: #e01e5a; }
.thread { color: #616061; font-size: 12px; padding: 0 20px 12px 66px; }
"""


def mrkdwn(text: str) -> str:
    """Slack's mrkdwn to HTML: the message's text is already escaped (&amp; &lt; &gt;)."""
    parts = re.split(r"```\n?(.*?)\n?```", text, flags=re.S)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<pre>{part}</pre>")
            continue
        part = re.sub(r"`([^`\n]+)`", r"<code>\1</code>", part)
        part = re.sub(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])", r"<b>\1</b>", part)
        part = re.sub(r"&lt;(https?://[^|&]+)\|([^&]+)&gt;", r'<a href="\1">\2</a>', part)
        part = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r'<a href="\1">\2</a>', part)
        out.append(part)
    return "".join(out)


def render(message: dict[str, Any]) -> str:
    rows = []
    for b in message["blocks"]:
        if b["type"] == "header":
            rows.append(f"<h3>{html.escape(b['text']['text'])}</h3>")
        elif b["type"] == "section":
            rows.append(f"<div class='section'>{mrkdwn(b['text']['text'])}</div>")
        elif b["type"] == "context":
            texts = " ".join(mrkdwn(e["text"]) for e in b["elements"])
            rows.append(f"<div class='context'>{texts}</div>")
        elif b["type"] == "actions":
            buttons = [
                f"<span class='button {e.get('style', '')}'>{html.escape(e['text']['text'])}</span>"
                for e in b["elements"]
            ]
            rows.append("<div>" + "".join(buttons) + "</div>")
    return (
        f"<html><head><style>{CSS}</style></head><body>"
        "<div class='thread'>Thread in #training-failures · reply to a shared rank2.log</div>"
        "<div class='msg'><div class='avatar'>lt</div><div>"
        "<span class='name'>logtriage</span><span class='app'>APP</span><span class='time'>2:07 PM</span>"
        + "".join(rows)
        + "</div></div></body></html>"
    )


def main() -> None:
    from playwright.sync_api import sync_playwright

    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    page_html = render(json.loads(src.read_text()))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        page = browser.new_page(viewport={"width": 760, "height": 400}, device_scale_factor=1)
        page.set_content(page_html)
        page.screenshot(path=str(dest), full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
