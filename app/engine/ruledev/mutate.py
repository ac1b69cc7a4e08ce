"""Fixture mutations: the same log as other launchers, terminals and versions print it.

A rule written from one pasted log tends to match that paste only. Real logs of the same failure
come with a Ray or torchrun prefix on every line, colour codes, CRLF line ends, a glog header
in front of the message, cut at the top or the bottom by whoever copied it. Each mutation below
produces such a variant of a must-match fixture; `rules test --mutations` (and the test suite)
check every rule still fires on every variant.
"""

from __future__ import annotations

from collections.abc import Callable

Mutation = Callable[[str], str]


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _each(prefix: str) -> Mutation:
    def apply(text: str) -> str:
        return "\n".join(prefix + line if line else line for line in _lines(text)) + "\n"

    return apply


def ansi(text: str) -> str:
    """Colour codes around each line (rich, loguru and tqdm colour their output)."""
    return "\n".join(f"\x1b[1;31m{line}\x1b[0m" if line else line for line in _lines(text)) + "\n"


def crlf(text: str) -> str:
    return "\r\n".join(_lines(text)) + "\r\n"


def glog(text: str) -> str:
    """A C++ glog header before every line, as torch's c10 logging prints it."""
    return (
        "\n".join(
            f"[E1123 18:52:58.{i:06d} ProcessGroupNCCL.cpp:{1000 + i}] {line}" if line else line
            for i, line in enumerate(_lines(text))
        )
        + "\n"
    )


def drop_comments(text: str) -> str:
    """The fixture without its `# source:` header lines (what a user would paste)."""
    return "\n".join(line for line in _lines(text) if not line.startswith("# ")) + "\n"


def wrapped(text: str, width: int = 64) -> str:
    """Every line cut into rows of a terminal's width, as copied from tmux or a web console."""
    rows = []
    for line in _lines(text):
        rows.extend([line[i : i + width] for i in range(0, len(line), width)] or [""])
    return "\n".join(rows) + "\n"


MUTATIONS: dict[str, Mutation] = {
    "ray-prefix": _each("(WorkerDict pid=90412, ip=10.12.0.33) "),
    "ray-repeated": _each("(RolloutWorker pid=311, ip=10.0.0.5) [repeated 3x across cluster] "),
    "torchrun-rank": _each("[rank3]: "),
    "torchrun-tee": _each("[default1]:"),
    "srun-label": _each("7: "),
    "pdsh-host": _each("gpu-node-12: "),
    "kubectl-timestamp": _each("2026-11-23T18:52:58.388123456Z "),
    # the node's own container log (/var/log/pods/...): CRI timestamp, stream and full-line tag
    "cri-log": _each("2026-11-23T18:52:58.388123456Z stderr F "),
    "ansi": ansi,
    "crlf": crlf,
    "glog": glog,
    "no-comments": drop_comments,
    "wrapped": wrapped,
}
