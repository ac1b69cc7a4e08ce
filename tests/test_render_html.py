"""Remediation markdown on the report page: the subset rules use, and never injected markup."""

from __future__ import annotations

from app.render.html import markdown_block


def test_lists_with_wrapped_items_code_and_bold() -> None:
    text = (
        "Handle it as a **hardware** *fault*:\n"
        "- find the GPU: `nvidia-smi -q -d ECC` and\n"
        "  `dmesg -T | grep -i xid` on the node;\n"
        "- drain that node.\n"
        "\n"
        "Then resume."
    )
    html = str(markdown_block(text))
    assert html == (
        "<p>Handle it as a <strong>hardware</strong> <em>fault</em>:</p>\n"
        "<ul><li>find the GPU: <code>nvidia-smi -q -d ECC</code> and <code>dmesg -T | grep -i xid</code> on the node;</li>"
        "<li>drain that node.</li></ul>\n"
        "<p>Then resume.</p>"
    )


def test_everything_is_escaped_first() -> None:
    html = str(
        markdown_block("<script>alert(1)</script> `<b>` [x](javascript:alert(1)) [ok](https://example.com/a)")
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<code>&lt;b&gt;</code>" in html
    assert 'href="javascript' not in html
    assert '<a href="https://example.com/a" rel="noopener">ok</a>' in html


def test_fenced_code_is_kept_verbatim() -> None:
    html = str(markdown_block("Run:\n```bash\nexport A=1 && echo <x>\n```\n"))
    assert "<pre><code>export A=1 &amp;&amp; echo &lt;x&gt;</code></pre>" in html
