"""Failures grouped by the error line they end with (issue 23's unknowns inbox), pure logic.

An analysis is known by its most telling signal line (app.engine.signals: an exception's own
line first). Analyses whose lines have the same masked template fall together at once; then
the distinct templates go through one `TemplateMiner`, so templates that differ in a word a
mask does not know (a tensor's name, a module) merge into one ``<*>``. The group's id is its
most common template's key (``t:<key>``), so the id stays put while the group grows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

NO_SIGNAL = "t:none"  # analyses whose logs end with no error line at all


@dataclass(frozen=True)
class Member:
    analysis_id: str
    key: str | None  # the primary signal's template key (None: no signal line)
    template: str | None


@dataclass
class Group:
    id: str
    template: str  # the miner's template for the group (with <*> where members differ)
    members: list[str] = field(default_factory=list)  # analysis ids, in the order given
    keys: Counter[str] = field(default_factory=Counter)  # member templates' keys


def group_failures(members: Sequence[Member]) -> list[Group]:
    """Groups of ``members`` (in their order inside a group), the largest first (ties: the one
    whose first member comes first, i.e. the newest when given newest first)."""
    from app.engine.templates import TemplateMiner

    by_key: dict[str, list[Member]] = {}
    none: list[Member] = []
    for m in members:
        if m.key is None or m.template is None:
            none.append(m)
        else:
            by_key.setdefault(m.key, []).append(m)
    # the commonest templates first: the miner's clusters then grow from them
    order = sorted(by_key, key=lambda k: (-len(by_key[k]), k))
    miner = TemplateMiner()
    cluster_of: dict[str, int] = {}
    for k in order:
        cid, _template = miner.add(by_key[k][0].template or "", masked=True)
        cluster_of[k] = cid
    templates = {c.cluster_id: c.template for c in miner.clusters()}
    by_cluster: dict[int, list[str]] = {}
    for k in order:
        by_cluster.setdefault(cluster_of[k], []).append(k)
    position = {m.analysis_id: i for i, m in enumerate(members)}
    out: list[Group] = []
    for cid, keys in by_cluster.items():
        ids = sorted((m.analysis_id for k in keys for m in by_key[k]), key=position.__getitem__)
        counts = Counter({k: len(by_key[k]) for k in keys})
        lead = min(keys, key=lambda k: (-counts[k], k))
        template = templates.get(cid) or (by_key[lead][0].template or "")
        out.append(Group(f"t:{lead}", template, ids, counts))
    if none:
        out.append(Group(NO_SIGNAL, "", [m.analysis_id for m in none], Counter()))
    out.sort(key=lambda g: (-len(g.members), min(position[a] for a in g.members)))
    return out


__all__ = ["NO_SIGNAL", "Group", "Member", "group_failures"]
