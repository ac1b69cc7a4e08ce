"""Log template mining: turn raw lines into stable templates ("Connection from <IP> closed").

Two stages, both streaming and pure Python:

- ``mask(line)`` replaces variable tokens with typed placeholders (``<UUID>``, ``<URL>``,
  ``<IP>``, ``<TIME>``, ``<DATE>``, ``<PATH>``, ``<HOST>``, ``<HEX>``, ``<NUM>``, ``<ID>``). One
  generic rule set for every log source: nothing here is tuned to one data set.
- ``TemplateMiner`` groups masked lines with a Drain-style fixed-depth tree (He et al., ICWS'17):
  lines are bucketed by token count, then by their first few tokens; inside a bucket a line joins
  the most similar cluster if the similarity reaches a threshold, and the positions where the two
  differ become ``<*>``. Memory is bounded: at most ``max_clusters`` clusters are kept (least
  recently used evicted first), at most ``max_children`` branches per tree node, and a line is
  cut to ``max_tokens`` tokens.

``template_key(template)`` is a short stable id for grouping across analyses and processes.

Why our own and not the ``drain3`` package: ``bench/loghub_bench.py`` measures both on the 16
Loghub 2k sets with the same preprocessing; see bench/README.md for the figures.

Every regular expression below is linear-time: no nested or overlapping quantifiers, repeated
groups only where a literal delimiter that the group's own character class cannot match
separates the repetitions, and every alternative that could otherwise be retried from each
position of a long run is anchored by a look-behind on a token boundary.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "PLACEHOLDERS",
    "WILDCARD",
    "Cluster",
    "TemplateMiner",
    "mask",
    "template_key",
    "template_of",
]

WILDCARD = "<*>"
PLACEHOLDERS = ("<UUID>", "<URL>", "<IP>", "<TIME>", "<DATE>", "<PATH>", "<HOST>", "<HEX>", "<NUM>", "<ID>")

# Order matters: at one position the first alternative that matches wins, so the more specific
# shapes (a UUID is also hex, an IP is also numbers, a URL holds a host and a path) come first.
_NUM = r"[<>~]?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# size and duration units, glued ("1.96GiB") or after one space ("1190 bytes", "<1 sec"), so a
# quantity is one token however it is written
_UNIT = r"(?:[KMGTP]i?B|[kKMGT]|B|bytes?|[mun]?s|secs?|seconds?|mins?|minutes?|hours?|%)"
_QTY = rf"{_NUM}(?: ?{_UNIT})?"
_MASK_PARTS = [
    # 8-4-4-4-12 hex: fixed widths, no repetition to backtrack into
    (
        "UUID",
        r"(?<![\w-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![\w-])",
    ),
    # scheme://rest-of-token; the scheme is bounded so a long word is not rescanned from every
    # letter
    ("URL", r"(?<![\w+.-])[A-Za-z][A-Za-z0-9+.-]{0,15}://[^\s\"'<>()\[\]{},;]+"),
    # IPv4 with optional port
    ("IP", r"(?<![\w.])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?::\d{1,5})?(?![\w.])"),
    # ISO-ish dates, optionally glued to a time (2024-05-01T12:00:00.123Z, 2016/9/27:20:30:31)
    (
        "DATE",
        r"(?<!\w)\d{4}[-/]\d{1,2}[-/]\d{1,2}(?:[T:]\d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?Z?)?(?![\w:])",
    ),
    ("TIME", r"(?<![\w:])\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d{1,9})?(?![\w:])"),
    # IPv6 and MAC: colon-separated hex groups; the callback keeps only real-looking ones
    ("IP6", r"(?<![\w:])[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?![\w:])"),
    # two or more /segments; a leading digit would be an IP or a number, handled above
    ("PATH", r"(?<![\w/.~-])(?:~|\.{1,2})?(?:/[A-Za-z_.~@+-][\w.~@+-]*){2,}/?"),
    # dotted host names that end in a lowercase label (java.lang.Foo ends in a capital, so a
    # class name stays literal), with an optional port; one dot is enough with a port
    (
        "HOST",
        r"(?<![\w.-])(?:(?:[A-Za-z0-9][A-Za-z0-9-]{0,62}\.){2,}[a-z]{2,24}(?::\d{1,5})?"
        r"|(?:[A-Za-z0-9][A-Za-z0-9-]{0,62}\.){1,}[a-z]{2,24}:\d{1,5})(?![\w.-])",
    ),
    # a quantity, optionally restated in parentheses in other units: "1190 bytes (1.16 KB)"
    ("NUM", rf"(?<![\w.]){_QTY}(?: \({_QTY}\))?(?![\w])"),
    # after NUM, so an all-digit run stays a number
    ("HEX", r"(?<![\w.])(?:0[xX][0-9a-fA-F]+|[0-9a-fA-F]{8,})(?![\w.])"),
    # any other identifier-like run holding a digit (blk_-1608, core.2275, rank3, attempt_1_0002)
    ("ID", r"(?<![\w.-])[\w.-]*\d[\w.-]*"),
    # digits left glued to other characters ("x.458", "@0x1f:3")
    ("DIGITS", r"\d+"),
]
# Every shape but DIGITS starts on a word boundary; checking that once, up front, makes the scan
# of a position inside a word cost one look-behind instead of one attempt per alternative.
_MASK_RX = re.compile(
    "(?<!\\w)(?:"
    + "|".join(f"(?P<{name}>{rx})" for name, rx in _MASK_PARTS if name != "DIGITS")
    + ")|(?P<DIGITS>\\d+)"
)
_PLACEHOLDER = {name: f"<{name}>" for name, _ in _MASK_PARTS}
_PLACEHOLDER["IP6"] = "<IP>"
_PLACEHOLDER["DIGITS"] = "<NUM>"


_DIGITS_RX = re.compile(r"\d+")


def _replace(m: re.Match[str]) -> str:
    kind = m.lastgroup or "ID"
    if kind == "HEX" and m.group().isdigit():
        return "<NUM>"
    if kind == "IP6":
        text = m.group()
        groups = text.split(":")
        if "::" in text or len(groups) == 8:
            return "<IP>"
        if len(groups) == 6 and all(len(g) == 2 for g in groups):
            return "<HEX>"  # a MAC address
        # "a:b:c" words joined by colons are not addresses; digits in them still vary
        return _DIGITS_RX.sub("<NUM>", text)
    return _PLACEHOLDER[kind]


def mask(line: str) -> str:
    """``line`` with its variable tokens replaced by typed placeholders.

    >>> mask("Connection from 10.0.0.7:5000 closed after 1.5s")
    'Connection from <IP> closed after <NUM>'
    """
    return _MASK_RX.sub(_replace, line)


_VARIABLE_TOKENS = frozenset((*PLACEHOLDERS, WILDCARD))


def _is_variable(token: str) -> bool:
    return token in _VARIABLE_TOKENS


def _has_variable(token: str) -> bool:
    """A token that holds a placeholder ("<HOST>:<NUM>", "uid=<NUM>") varies from line to line,
    so it must not pick a tree branch of its own (Drain routes tokens with digits the same way)."""
    return "<" in token and _PART_RX.search(token) is not None


_PART_RX = re.compile("|".join(re.escape(p) for p in (*PLACEHOLDERS, WILDCARD)))


def template_key(template: str) -> str:
    """A stable 12-hex-digit id of ``template``: typed placeholders and whitespace runs are
    normalised first, so ``"a <NUM>"`` and ``"a  <*>"`` share a key across processes and versions
    of the placeholder set."""
    norm = " ".join(WILDCARD if _is_variable(t) else t for t in template.split())
    return hashlib.sha1(norm.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass
class Cluster:
    """One template: its id (stable for the miner's lifetime), its tokens and how many lines it
    absorbed."""

    cluster_id: int
    tokens: list[str]
    size: int = 0
    _path: tuple[object, ...] = field(default=(), repr=False)

    @property
    def template(self) -> str:
        return " ".join(self.tokens)


class _Node:
    __slots__ = ("children", "clusters")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.clusters: list[int] = []


class TemplateMiner:
    """A streaming Drain-style template miner with bounded memory.

    ``add(line)`` learns from ``line`` and returns ``(cluster_id, template)``; ``match(line)``
    looks a line up without learning anything. Lines are masked with ``mask`` first unless
    ``masked=True`` is passed to those calls.

    Parameters:

    - ``depth``: tree depth; ``depth - 2`` leading tokens pick the leaf (Drain's ``depth``).
    - ``sim_threshold``: the least share of equal tokens for a line to join a cluster.
    - ``max_children``: branches per tree node; further tokens share the ``<*>`` branch, which
      bounds the tree whatever the input.
    - ``max_clusters``: clusters kept; when a new one would exceed it, the least recently used
      cluster is evicted (its id is never reused). Memory is therefore O(max_clusters *
      max_tokens) whatever the length of the stream.
    - ``max_tokens``: a longer line keeps its first ``max_tokens - 1`` tokens and the rest are
      joined into one last token.

    Deterministic: the same lines in the same order give the same ids and templates.
    """

    def __init__(
        self,
        *,
        depth: int = 4,
        sim_threshold: float = 0.7,
        max_children: int = 100,
        max_clusters: int = 10_000,
        max_tokens: int = 128,
    ) -> None:
        if depth < 3:
            raise ValueError("depth must be >= 3")
        if max_clusters < 1:
            raise ValueError("max_clusters must be >= 1")
        self.depth = depth
        self.sim_threshold = sim_threshold
        self.max_children = max_children
        self.max_clusters = max_clusters
        self.max_tokens = max_tokens
        self._root: dict[int, _Node] = {}
        # insertion order doubles as recency order: move_to_end on every hit
        self._clusters: OrderedDict[int, Cluster] = OrderedDict()
        self._next_id = 1
        self.evicted = 0

    # -- tokens ---------------------------------------------------------------------------------

    def _tokens(self, line: str, masked: bool) -> list[str]:
        toks = (line if masked else mask(line)).split()
        if len(toks) > self.max_tokens:
            toks = [*toks[: self.max_tokens - 1], " ".join(toks[self.max_tokens - 1 :])]
        return toks

    # -- tree -----------------------------------------------------------------------------------

    def _leaf(self, tokens: list[str], create: bool) -> tuple[_Node | None, tuple[object, ...]]:
        n = len(tokens)
        node = self._root.get(n)
        if node is None:
            if not create:
                return None, ()
            node = self._root[n] = _Node()
        path: list[object] = [n]
        for tok in tokens[: self.depth - 2]:
            key = WILDCARD if _has_variable(tok) else tok
            nxt = node.children.get(key)
            if nxt is None:
                if not create:
                    key = WILDCARD
                    nxt = node.children.get(key)
                    if nxt is None:
                        return None, ()
                else:
                    # one slot stays free for the <*> branch, so a node never exceeds max_children
                    if key != WILDCARD and len(node.children) >= self.max_children - 1:
                        key = WILDCARD
                    nxt = node.children.get(key)
                    if nxt is None:
                        nxt = node.children[key] = _Node()
            path.append(key)
            node = nxt
        return node, tuple(path)

    def _similarity(self, template: list[str], tokens: list[str]) -> tuple[float, int]:
        same = 0
        params = 0
        for t, s in zip(template, tokens, strict=True):
            if t == WILDCARD:
                params += 1
                if _is_variable(s):
                    same += 1
            elif t == s:
                same += 1
        return (same / len(tokens) if tokens else 1.0), params

    def _best(self, leaf: _Node, tokens: list[str]) -> Cluster | None:
        best: Cluster | None = None
        best_key = (-1.0, -1)
        for cid in leaf.clusters:
            c = self._clusters[cid]
            key = self._similarity(c.tokens, tokens)
            if key > best_key:
                best, best_key = c, key
        if best is not None and best_key[0] >= self.sim_threshold:
            return best
        return None

    # -- public ---------------------------------------------------------------------------------

    def add(self, line: str, *, masked: bool = False) -> tuple[int, str]:
        """Learn ``line``; returns its cluster's id and (possibly just generalised) template."""
        tokens = self._tokens(line, masked)
        leaf, path = self._leaf(tokens, create=True)
        assert leaf is not None
        c = self._best(leaf, tokens)
        if c is None:
            c = Cluster(self._next_id, tokens, 0, path)
            self._next_id += 1
            self._clusters[c.cluster_id] = c
            leaf.clusters.append(c.cluster_id)
            if len(self._clusters) > self.max_clusters:
                self._evict()
        else:
            c.tokens = [t if t == s else WILDCARD for t, s in zip(c.tokens, tokens, strict=True)]
            self._clusters.move_to_end(c.cluster_id)
        c.size += 1
        return c.cluster_id, c.template

    def match(self, line: str, *, masked: bool = False) -> Cluster | None:
        """The cluster ``line`` would join, or None; learns nothing and does not touch recency."""
        tokens = self._tokens(line, masked)
        leaf, _ = self._leaf(tokens, create=False)
        return None if leaf is None else self._best(leaf, tokens)

    def clusters(self) -> list[Cluster]:
        """The live clusters, oldest id first."""
        return sorted(self._clusters.values(), key=lambda c: c.cluster_id)

    def __len__(self) -> int:
        return len(self._clusters)

    def _evict(self) -> None:
        cid, victim = self._clusters.popitem(last=False)
        self.evicted += 1
        n = victim._path[0]
        assert isinstance(n, int)
        node = self._root[n]
        trail: list[tuple[_Node, str]] = []
        for key in victim._path[1:]:
            assert isinstance(key, str)
            trail.append((node, key))
            node = node.children[key]
        node.clusters.remove(cid)
        # prune now-empty branches so the tree shrinks with the cluster table
        while trail and not node.clusters and not node.children:
            parent, key = trail.pop()
            del parent.children[key]
            node = parent
        if not trail and not node.clusters and not node.children:
            del self._root[n]


def template_of(lines: Iterable[str], **kwargs: object) -> list[str]:
    """The final template of each line after mining all of ``lines`` (so early lines get the
    templates that later lines generalised). ``kwargs`` go to ``TemplateMiner``."""
    miner = TemplateMiner(**kwargs)  # type: ignore[arg-type]
    added = [miner.add(line) for line in lines]
    final = {c.cluster_id: c.template for c in miner.clusters()}
    # an evicted cluster keeps the template it had when its line was added
    return [final.get(cid, tmpl) for cid, tmpl in added]
