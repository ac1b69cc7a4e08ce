#!/usr/bin/env python3
"""Issue 23's learning figures, measured with the real engine on the project's blind corpora.

    python bench/learn_bench.py clusters [--no-cache]   # purity, split failures, similar links
    python bench/learn_bench.py curve [--rules DIR]     # the learning curve: top-1 against rules taught
    python bench/learn_bench.py mining [--size 1G]      # what find_signals adds to the scan of a big log
    python bench/learn_bench.py all

Blind corpora: tests/corpus/fresh*/manifest.yaml and tests/corpus/advice*/advice.yaml (every
entry has `file` and `expected_class`), in that order (set by set, entries as listed). Each log
goes through `app.engine.pipeline.triage.triage` (what `logtriage analyze` runs); the results
(root class, signal lines) are cached in bench/out/learn-corpus-<library version>.json.

`clusters`: the unknowns (no root cause) of the blind sets, plus made-up site failures (SITE:
6 invented failures x 4 variants with other numbers, ids, paths, hosts and launcher prefixes,
each inside a healthy-looking training log), grouped by `app.engine.clusters.group_failures`
exactly as `app.service.learn.list_clusters` does (Member = the first signal's key + template).
Labels: an invented failure's id; a corpus log's expected class, except `unknown` (a negative:
a user's own bug, each one different), which is labelled by its file (one log = one failure).
Purity = sum over clusters of the majority label's count / members; "split" = labels whose
members land in more than one cluster. Similar links: for each analysis, the others sharing a
signal key, ranked as `similar_failures` ranks them (same first key first, then most keys
shared, then the newest); precision of the top 3 (same label = right), over analyses that have
at least one link (the corpus' named failures are labelled by their expected class, so "same
label" there means "the same class of failure").

`curve`: see `curve()`; `mining`: see `mining()`. Results: bench/out/learn-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(REPO))

CORPUS = REPO / "tests" / "corpus"


@dataclass
class Case:
    """One corpus entry (or one invented failure's variant)."""

    name: str  # set/file
    expected: str
    label: str  # what it really is, for purity (see the docstring)
    paths: list[str]
    exit_code: int | None = None
    text: str | None = None  # invented logs: the log itself


def blind_cases() -> list[Case]:
    import yaml

    manifests = sorted(CORPUS.glob("fresh*/manifest.yaml"), key=lambda p: _set_order(p.parent.name))
    manifests += sorted(CORPUS.glob("advice*/advice.yaml"), key=lambda p: _set_order(p.parent.name))
    out: list[Case] = []
    for m in manifests:
        data = yaml.safe_load(m.read_text(encoding="utf-8")) or {}
        entries = data.get("entries") or [] if isinstance(data, dict) else data
        for e in entries:
            files = e["file"] if isinstance(e["file"], list) else [e["file"]]
            name = f"{m.parent.name}/{', '.join(files)}"
            cls = str(e["expected_class"])
            out.append(
                Case(
                    name=name,
                    expected=cls,
                    label=cls if cls != "unknown" else f"negative:{name}",
                    paths=[str(m.parent / f) for f in files],
                    exit_code=e.get("exit_code"),
                )
            )
    return out


def _set_order(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    num = name[len(stem) :]
    return stem, int(num) if num else 1


# --- invented site failures: none of these wordings is in the bundled rules -----------------
# each: id, a format of the failing lines (the last is the failure itself), and a fill function
def _site_failures() -> list[tuple[str, str]]:
    return [
        (
            "site.storage_lease",
            "{pre}Traceback (most recent call last):\n"
            '{pre}  File "/opt/{team}/storage/lease.py", line {n1}, in renew\n'
            "{pre}LeaseExpiredError: storage lease {hexid} on {path} expired after {n2} s "
            "(holder {host})\n",
        ),
        (
            "site.sched_preempt",
            "{ts} [{host}] SCHED-7 job {jobid} preempted by priority-class {word} after {n1} min; "
            "reason=quota_reclaim slot={n2}\n"
            "{ts} [{host}] FATAL orchestrator: worker group {hexid} evicted, requeue token {uuid}\n",
        ),
        (
            "site.data_validation",
            "{pre}Traceback (most recent call last):\n"
            '{pre}  File "/opt/{team}/dataval/check.py", line {n1}, in validate\n'
            "{pre}DataValidationError: shard {path} failed schema check: column 'reward' has "
            "{n2} nulls (limit 0) in row group {n3}\n",
        ),
        (
            "site.license_server",
            "{ts} ERROR licmgr: could not check out feature 'accel-compiler' from license server "
            "{host}:{port} (FLEXlm error -{n1},{n2}); {n3} of {n4} seats in use\n",
        ),
        (
            "site.reward_timeout",
            "{pre}Traceback (most recent call last):\n"
            '{pre}  File "/opt/{team}/rl/reward_client.py", line {n1}, in score\n'
            "{pre}RewardServerTimeout: reward server http://{host}:{port}/v1/score did not answer "
            "batch {n2} within {n3}.0 s (request id {hexid})\n",
        ),
        (
            "site.feature_store",
            "{ts} CRITICAL featstore-client: snapshot {uuid} of table {word}.events is stale by "
            "{n1} h (max {n2} h); refusing to read for step {n3}\n",
        ),
    ]


def site_cases(variants: int = 4, seed: int = 23) -> list[Case]:
    """Each invented failure `variants` times: other numbers, ids, paths, hosts, prefixes."""
    rng = random.Random(seed)
    prefixes = [
        lambda: (
            f"(WorkerDict pid={rng.randrange(1000, 99999)}, "
            f"ip=10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}) "
        ),
        lambda: f"[rank{rng.randrange(64)}]: ",
        lambda: "",
        lambda: f"(TaskRunner pid={rng.randrange(1000, 99999)}) ",
    ]
    words = ["batch", "interactive", "research", "prod", "eval", "spot"]
    out: list[Case] = []
    for fid, fmt in _site_failures():
        for v in range(variants):
            pre = prefixes[v % len(prefixes)]()
            fill = {
                "pre": pre,
                "team": rng.choice(["mlinfra", "rlhf", "platform", "core"]),
                "n1": rng.randrange(2, 999),
                "n2": rng.randrange(2, 9999),
                "n3": rng.randrange(2, 99),
                "n4": rng.randrange(100, 200),
                "hexid": f"0x{rng.randrange(16**8):08x}",
                "path": f"/mnt/{rng.choice(['lustre', 'weka', 'gcs'])}/run-{rng.randrange(9999)}"
                f"/part-{rng.randrange(999):05d}.parquet",
                "host": f"{rng.choice(['gpu', 'node', 'trn'])}-{rng.randrange(999):03d}"
                f".{rng.choice(['us-east', 'eu-west'])}.corp",
                "port": rng.randrange(1024, 65000),
                "jobid": f"j-{rng.randrange(10**6)}",
                "uuid": "%08x-%04x-%04x-%04x-%012x"  # noqa: UP031
                % (
                    rng.randrange(16**8),
                    rng.randrange(16**4),
                    rng.randrange(16**4),
                    rng.randrange(16**4),
                    rng.randrange(16**12),
                ),
                "word": rng.choice(words),
                "ts": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} "
                f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}",
            }
            tail = fmt.format(**fill)
            steps = rng.randrange(10, 40)
            job = f"{fid.split('.')[1]}-{v}"
            body = "".join(
                f"[{job}] step {i} loss {1.0 / (i + 1):.4f} lr 1e-5 "
                f"throughput {rng.randrange(900, 1500)} tokens/s\n"
                for i in range(steps)
            )
            out.append(Case(name=f"site/{fid}#{v}", expected=fid, label=fid, paths=[], text=body + tail))
    return out


# --- triage, cached ------------------------------------------------------------------------
def compiled_library(rules: Path | None = None, pack: Any = None) -> Any:
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary

    lib = load_library(rules)
    if pack is not None:
        lib = lib.with_pack(pack)
    return CompiledLibrary(lib)


def triage_case(compiled: Any, case: Case) -> dict[str, Any]:
    """root class, rule id and signals of one case (what the service stores of it)."""
    from app.engine.pipeline.ingest import Source, collect_sources
    from app.engine.pipeline.triage import TriageOptions, triage

    if case.text is not None:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
            fh.write(case.text)
            tmp = fh.name
        try:
            sources, _ = collect_sources([tmp])
            a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
        finally:
            Path(tmp).unlink()
    else:
        sources, _ = collect_sources(case.paths)
        a = triage(
            sources=sources, compiled=compiled, options=TriageOptions(jobs=1, exit_code=case.exit_code)
        )
    del Source
    data = a.model_dump(mode="json")
    root = data.get("root_cause")
    return {
        "predicted": root["failure_class"] if root else "unknown",
        "rule_id": root["rule_id"] if root else None,
        "signals": data.get("signals") or [],
        "full": data,
    }


def triaged(
    cases: Sequence[Case], *, cache: bool = True, keep_full: bool = False, rules: Path | None = None
) -> list[dict[str, Any]]:
    """Each case's triage (the bundled library, or `rules`), cached by library version."""
    compiled = compiled_library(rules)
    path = OUT / f"learn-corpus-{compiled.library.version}.json"
    have: dict[str, dict[str, Any]] = {}
    if cache and path.is_file() and not keep_full:
        have = json.loads(path.read_text())
    out = []
    t0 = time.perf_counter()
    for c in cases:
        key = c.name
        if key not in have or keep_full:
            r = triage_case(compiled, c)
            if not keep_full:
                r.pop("full")
            have[key] = r
        out.append(have[key])
    if not keep_full:
        OUT.mkdir(exist_ok=True)
        path.write_text(json.dumps(have))
    print(
        f"  triaged {len(cases)} logs in {time.perf_counter() - t0:.1f} s ({compiled.library.version})",
        file=sys.stderr,
    )
    return out


# --- clusters and similar links --------------------------------------------------------------
def _purity(groups: list[tuple[str, list[str]]], label: dict[str, str]) -> dict[str, Any]:
    """groups: (group id, member names)."""
    total = sum(len(m) for _g, m in groups)
    right = sum(Counter(label[x] for x in m).most_common(1)[0][1] for _g, m in groups if m)
    where: dict[str, set[str]] = defaultdict(set)
    size: Counter[str] = Counter()
    for g, m in groups:
        for x in m:
            where[label[x]].add(g)
            size[label[x]] += 1
    multi = [lab for lab in size if size[lab] >= 2]
    split = sorted(lab for lab in multi if len(where[lab]) > 1)
    impure = [
        {"id": g, "size": len(m), "labels": dict(Counter(label[x] for x in m).most_common())}
        for g, m in groups
        if len({label[x] for x in m}) > 1
    ]
    return {
        "members": total,
        "clusters": len(groups),
        "purity": round(right / total, 4) if total else None,
        "labels_with_2_plus": len(multi),
        "split_labels": split,
        "split_share": round(len(split) / len(multi), 4) if multi else None,
        "impure_clusters": impure,
    }


def clusters(*, cache: bool = True, rules: Path | None = None) -> dict[str, Any]:
    """Purity of the unknowns inbox and precision of similar-failure links, through the real
    service functions on a SQLite store of the blind sets + the invented failures (stored in
    replay order, one second apart), cross-checked with `group_failures` called directly."""
    import datetime as dt
    import tempfile
    from types import SimpleNamespace

    from backtest_bench import seed

    from app.db import repo
    from app.engine.clusters import NO_SIGNAL, Member, group_failures
    from app.service.access import Principal
    from app.service.learn import list_clusters, similar_failures

    site = site_cases()
    cases = _interleave(blind_cases(), site)
    res = triaged(cases, cache=cache, keep_full=True, rules=rules)
    label = {c.name: c.label for c in cases}
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    items = [
        (r["full"], [], t0 + dt.timedelta(seconds=i), repo.JobMeta(job_id=c.name[:200]))
        for i, (c, r) in enumerate(zip(cases, res, strict=True))
    ]
    out: dict[str, Any] = {"logs": len(cases), "invented": len(site), "rules_dir": str(rules or "bundled")}
    with tempfile.TemporaryDirectory(prefix="lt-learn-") as tmp:
        from app.db.session import Database

        url = f"sqlite:///{tmp}/learn.db"
        ids = seed(url, items)
        name_of = dict(zip(ids, (c.name for c in cases), strict=True))
        ctx = SimpleNamespace(db=Database(url))
        who = Principal(token_id=None, name="bench", scopes=frozenset({"admin"}))
        found = list_clusters(ctx, principal=who, unknown=True, status=None, limit=10_000)  # type: ignore[arg-type]
        groups = [(c.id, [name_of[a] for a in c.analysis_ids]) for c in found]
        unknown_names = {c.name for c, r in zip(cases, res, strict=True) if r["predicted"] == "unknown"}
        assert {x for _g, m in groups for x in m} == unknown_names, "inbox != the unknowns"
        # the same through group_failures directly (newest first, as list_clusters feeds it)
        members = []
        for c, r in reversed(list(zip(cases, res, strict=True))):
            if r["predicted"] != "unknown":
                continue
            s = r["signals"]
            members.append(Member(c.name, s[0]["key"], s[0]["template"]) if s else Member(c.name, None, None))
        direct = [(g.id, g.members) for g in group_failures(members)]
        out["service_equals_direct"] = sorted(sorted(m) for _g, m in groups) == sorted(
            sorted(m) for _g, m in direct
        )
        signal_groups = [(g, m) for g, m in groups if g != NO_SIGNAL]
        out["unknowns"] = len(unknown_names)
        out["no_signal_unknowns"] = sum(len(m) for g, m in groups if g == NO_SIGNAL)
        out["inbox"] = _purity(groups, label)
        out["inbox_without_no_signal_group"] = _purity(signal_groups, label)
        site_names = {c.name for c in site}
        # the clusters holding an invented failure, whole (the no-signal bucket apart)
        out["invented_purity"] = _purity(
            [(g, m) for g, m in signal_groups if any(x in site_names for x in m)], label
        )
        out["invented_without_signal"] = sorted(
            x for g, m in groups if g == NO_SIGNAL for x in m if x in site_names
        )
        # clusters holding an invented failure: anything else in them?
        out["invented_clusters_mixed_with_corpus"] = [
            {"id": g, "labels": dict(Counter(label[x] for x in m))}
            for g, m in groups
            if any(x in site_names for x in m) and any(x not in site_names for x in m)
        ]
        out["clusters_listed"] = [
            {
                "id": c.id,
                "count": c.count,
                "template": c.template[:160],
                "labels": dict(Counter(label[name_of[a]] for a in c.analysis_ids)),
            }
            for c in found
        ]
        # similar links: the real similar_failures (earlier analyses only), top 3
        links = {"all": [0, 0, 0], "unknown": [0, 0, 0], "named": [0, 0, 0], "invented": [0, 0, 0]}
        wrong_links: list[dict[str, Any]] = []
        by_link: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for aid, c, r in zip(ids, cases, res, strict=True):
            sims = similar_failures(ctx, analysis_id=aid, principal=who, limit=3)  # type: ignore[arg-type]
            if not sims:
                continue
            good = sum(label[name_of[s.analysis_id]] == c.label for s in sims)
            kinds = ["all", "unknown" if r["predicted"] == "unknown" else "named"]
            if c.name in site_names:
                kinds.append("invented")
            for k in kinds:
                links[k][0] += 1  # analyses with a link
                links[k][1] += len(sims)
                links[k][2] += good
            for s in sims:
                ok = label[name_of[s.analysis_id]] == c.label
                kind = (
                    "same first line"
                    if s.same_first
                    else f"{min(s.shared, 2)}{'+' if s.shared >= 2 else ''} shared line(s), first differs"
                )
                by_link[kind][0] += 1
                by_link[kind][1] += ok
                if not ok:
                    wrong_links.append(
                        {
                            "from": c.name,
                            "from_label": c.label,
                            "to": name_of[s.analysis_id],
                            "to_label": label[name_of[s.analysis_id]],
                            "same_first": s.same_first,
                            "shared": s.shared,
                            "line": (s.lines[0] if s.lines else "")[:140],
                        }
                    )
        out["similar_top3"] = {
            k: {
                "analyses_with_links": v[0],
                "links": v[1],
                "right": v[2],
                "precision": round(v[2] / v[1], 4) if v[1] else None,
            }
            for k, v in links.items()
        }
        out["similar_by_link"] = {
            k: {"links": n, "right": g, "precision": round(g / n, 4) if n else None}
            for k, (n, g) in sorted(by_link.items())
        }
        out["wrong_links"] = wrong_links
        ctx.db.dispose()
    return out


def _interleave(corpus: list[Case], site: list[Case]) -> list[Case]:
    """The invented failures spread evenly through the corpus order (deterministic)."""
    out = list(corpus)
    step = max(1, len(corpus) // (len(site) + 1))
    # variants of one failure far apart: failure f variant v goes to slot v * len(failures) + f
    by_fail: dict[str, list[Case]] = defaultdict(list)
    for c in site:
        by_fail[c.expected].append(c)
    ordered = [
        vs[v] for v in range(max(len(x) for x in by_fail.values())) for vs in by_fail.values() if v < len(vs)
    ]
    for i, c in enumerate(ordered):
        out.insert(min(len(out), (i + 1) * step + i), c)
    return out


# --- the learning curve ----------------------------------------------------------------------
def _baseline_lines() -> list[str]:
    """The healthy runs a draft must not match (what `create_draft` lints against)."""
    from app.engine.pipeline.library import default_rules_dir

    out: list[str] = []
    for p in sorted((default_rules_dir() / "_baseline").glob("*.log")):
        out.extend(p.read_text(encoding="utf-8", errors="replace").splitlines()[:20000])
    return out


def curve(
    *, rules: Path | None = None, with_site: bool = True, min_members: int = 2, mark_wrong: bool = False
) -> dict[str, Any]:
    """Replay the blind sets (and the invented failures spread through them) in order, as a
        site would: each log is triaged with the bundled library + the site pack of the moment;
        its top-1 is right when it names the expected class (`unknown` for a negative). The
        unknowns so far are grouped (`group_failures`, as the inbox does); when a group reaches
        `min_members`, a rule is drafted from the members' first signal lines (`draft_from_lines`)
        and linted as `create_draft` lints it (instances + the healthy baseline). Its class is what
        a person who read the logs would choose: the majority expected class of the group's
        members (the corpus label; a new `site.*` class for an invented failure); without a strict
    majority (two different failures in a group of two) no rule is taught. A group whose
        majority is `unknown` (negatives: users' own bugs) gets no rule: a person would not name a
        failure class for them. The rule goes into the pack when its lint and the pack's
        validation pass; the group's members are re-triaged with it (publishing offers that) and
        those it names leave the inbox. First contact = the same replay with no pack. With an
        older library (`--rules`), a class the library lacks gets a site class standing for it
        (`site.<class with _>`), scored as that class. `mark_wrong`: a log named with the wrong
        class joins the inbox too, as if a person marked it wrong (`list_clusters` includes those);
        it leaves when a re-triage names it right."""
    from app.engine.clusters import NO_SIGNAL, Member, group_failures
    from app.engine.drafts import draft_from_lines, lint
    from app.engine.pipeline.library import SitePack, load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.signals import message_of

    cases = blind_cases()
    site = site_cases() if with_site else []
    if site:
        cases = _interleave(cases, site)
    base = load_library(rules)
    compiled = CompiledLibrary(base)
    first = [triage_case(compiled, c)["predicted"] for c in cases]  # first contact, no pack
    baseline = _baseline_lines()
    entries: list[tuple[dict[str, Any], str]] = []
    classes: list[dict[str, str]] = []
    taught: list[dict[str, Any]] = []
    declined: list[dict[str, Any]] = []
    inbox: dict[str, dict[str, Any]] = {}  # name -> its signals, while unknown
    done_groups: set[str] = set()  # groups looked at and declined (negatives, lint problems)
    wrong_names: set[str] = set()  # named, with the wrong class
    alias: dict[str, str] = {}  # site class made for a class the library lacks -> that class
    rows: list[dict[str, Any]] = []
    right = right_first = 0
    by_name = {c.name: c for c in cases}
    t0 = time.perf_counter()
    for i, c in enumerate(cases):
        got = triage_case(compiled, c)
        got["predicted"] = alias.get(got["predicted"], got["predicted"])
        ok = got["predicted"] == c.expected
        if not ok and got["predicted"] != "unknown":
            wrong_names.add(c.name)
        right += ok
        right_first += first[i] == c.expected
        if got["predicted"] == "unknown" or (mark_wrong and not ok):
            inbox[c.name] = got
        # the inbox, newest first, as list_clusters groups it
        members = [
            Member(n, r["signals"][0]["key"], r["signals"][0]["template"])
            if r["signals"]
            else Member(n, None, None)
            for n, r in reversed(list(inbox.items()))
        ]
        for g in group_failures(members):
            if g.id == NO_SIGNAL or len(g.members) < min_members:
                continue
            sig = (g.id, len(g.members))
            if f"{sig}" in done_groups:
                continue
            labels = Counter(by_name[n].expected for n in g.members)
            cls, n_cls = labels.most_common(1)[0]
            texts = [inbox[n]["signals"][0]["text"] for n in g.members]
            note = {
                "at": i + 1,
                "group": g.id,
                "members": list(g.members),
                "labels": dict(labels),
                "template": g.template[:160],
            }
            if cls == "unknown":
                done_groups.add(f"{sig}")
                declined.append(
                    {**note, "why": "the members are negatives (users' own bugs): no class to name"}
                )
                continue
            if n_cls * 2 <= len(g.members):
                done_groups.add(f"{sig}")
                declined.append({**note, "why": "no majority class: the members are different failures"})
                continue
            d = draft_from_lines(texts)
            problems = d.problems or lint(
                d.pattern, instances=[message_of(t) for t in texts], baseline=baseline
            )
            if not d.pattern or problems:
                done_groups.add(f"{sig}")
                declined.append({**note, "why": "lint: " + "; ".join(problems)[:300], "pattern": d.pattern})
                continue
            rid = f"site-{len(entries) + 1:02d}-" + "-".join(re.findall(r"[a-z0-9]+", d.title.lower())[:4])
            new_classes = list(classes)
            rule_cls = cls
            if cls not in base.classes and not cls.startswith("site."):
                # a class this (older) library lacks: a person makes a site class for it
                rule_cls = "site." + cls.replace(".", "_")
                alias[rule_cls] = cls
            if rule_cls.startswith("site.") and rule_cls not in {x["id"] for x in classes}:
                kind = "infra" if "infra" in base.kinds or not base.kinds else next(iter(base.kinds))
                new_classes.append({"id": rule_cls, "kind": kind, "summary": f"site failure {cls}"})
            rule = d.as_rule(rule_id=rid[:60], failure_class=rule_cls)
            try:
                pack = SitePack.build([*entries, (rule, f"site:{rid}@1")], base=base, classes=new_classes)
            except Exception as exc:  # the pack's validation said no
                done_groups.add(f"{sig}")
                declined.append({**note, "why": f"pack: {exc}"[:300], "pattern": d.pattern})
                continue
            entries.append((rule, f"site:{rid}@1"))
            classes = new_classes
            compiled = CompiledLibrary(base.with_pack(pack))
            # publish -> re-triage the group's members: the named ones leave the inbox
            named = 0
            for n in g.members:
                again = triage_case(compiled, by_name[n])
                now = alias.get(again["predicted"], again["predicted"])
                if now != "unknown" and (
                    not mark_wrong or now == by_name[n].expected or n not in wrong_names
                ):
                    inbox.pop(n, None)
                    named += 1
            taught.append(
                {
                    **note,
                    "rule_id": rule["id"],
                    "class": cls,
                    "majority_share": round(n_cls / len(g.members), 3),
                    "pattern": d.pattern,
                    "retriaged_named": named,
                }
            )
        rows.append(
            {
                "log": i + 1,
                "name": c.name,
                "expected": c.expected,
                "predicted": got["predicted"],
                "first_contact": first[i],
                "rules_taught": len(entries),
                "running_top1": round(right / (i + 1), 4),
                "running_top1_first_contact": round(right_first / (i + 1), 4),
            }
        )
    # the whole replay again with the final pack: what the site's library says now
    final = [alias.get(p, p) for p in (triage_case(compiled, c)["predicted"] for c in cases)]
    n = len(cases)
    sets = []
    seen: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        seen[c.name.split("/")[0]].append(i)
    for s, idx in seen.items():
        sets.append(
            {
                "set": s,
                "logs": len(idx),
                "first_contact": round(sum(first[i] == cases[i].expected for i in idx) / len(idx), 4),
                "replay_with_teaching": round(
                    sum(rows[i]["predicted"] == cases[i].expected for i in idx) / len(idx), 4
                ),
                "final_pack": round(sum(final[i] == cases[i].expected for i in idx) / len(idx), 4),
                "rules_taught_by_end": rows[idx[-1]]["rules_taught"],
            }
        )
    # why the misses of the replay stayed misses
    why: Counter[str] = Counter()
    for i, c in enumerate(cases):
        row = rows[i]
        if row["predicted"] == c.expected:
            continue
        if row["predicted"] != "unknown":
            why["named with another class"] += 1
        elif c.name not in inbox:
            why["unknown then, named by a later rule"] += 1
        elif not inbox[c.name]["signals"]:
            why["unknown, no signal line (the t:none bucket: never drafted from)"] += 1
        else:
            key = inbox[c.name]["signals"][0]["key"]
            peers = sum(1 for r in inbox.values() if r["signals"] and r["signals"][0]["key"] == key)
            why[
                "unknown, alone in its group" if peers == 1 else "unknown, in a group declined or not taught"
            ] += 1
    wrong_by_pack = [
        {"name": c.name, "expected": c.expected, "first": first[i], "final": final[i]}
        for i, c in enumerate(cases)
        if first[i] == c.expected and final[i] != c.expected
    ]
    return {
        "logs": n,
        "invented": len(site),
        "library": base.version,
        "rules_dir": str(rules) if rules else "bundled",
        "seconds": round(time.perf_counter() - t0, 1),
        "first_contact_top1": round(sum(first[i] == c.expected for i, c in enumerate(cases)) / n, 4),
        "replay_top1": round(right / n, 4),
        "final_pack_top1": round(sum(final[i] == c.expected for i, c in enumerate(cases)) / n, 4),
        "rules_taught": len(entries),
        "taught": taught,
        "declined": declined,
        "broken_by_pack": wrong_by_pack,
        "misses_why": dict(why.most_common()),
        "by_set": sets,
        "rows": rows,
    }


# --- mining cost on a big log ----------------------------------------------------------------
def mining(*, size: str = "1G", runs: int = 3, jobs: int = 1) -> dict[str, Any]:
    """The scan of a generated log (bench/gen_log.py, reused when there) with `--jobs` scan
    processes, and `find_signals` on the scans' tails (each file's last 2,000 lines, which the
    scan keeps anyway), with the redaction triage applies, in the same run, `runs` times
    interleaved; plus the whole `triage` (scan + rules + timeline + signals) for scale."""
    import subprocess
    from collections import Counter as _C

    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.redact import redact_text
    from app.engine.pipeline.triage import TriageOptions, scan_all, triage
    from app.engine.signals import find_signals

    OUT.mkdir(exist_ok=True)
    log = OUT / f"learn-mining-{size}.log"
    if not log.is_file():
        subprocess.run(
            [sys.executable, str(BENCH / "gen_log.py"), str(log), "--size", size],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    nbytes = log.stat().st_size
    with log.open("rb") as fh:  # into the page cache
        while fh.read(1 << 24):
            pass
    compiled = compiled_library()
    scan_s, sig_s, tri_s, tri_scan_s = [], [], [], []
    n_sig = 0
    for _ in range(runs):
        sources, _w = collect_sources([str(log)])
        t0 = time.perf_counter()
        scans = scan_all(compiled, sources, jobs=jobs, max_bytes=0)
        scan_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sigs = find_signals([(s.name, s.tail) for s in scans], redact=lambda text: redact_text(text, _C()))
        sig_s.append(time.perf_counter() - t0)
        n_sig = len(sigs)
        sources, _w = collect_sources([str(log)])
        t0 = time.perf_counter()
        a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=jobs))
        tri_s.append(time.perf_counter() - t0)
        tri_scan_s.append(float(a.stats["scan_seconds"]))
    tail_lines = sum(len(s.tail) for s in scans)
    med = statistics.median
    return {
        "log": str(log.relative_to(REPO)),
        "bytes": nbytes,
        "jobs": jobs,
        "runs": runs,
        "tail_lines": tail_lines,
        "signals": n_sig,
        "first_signal": sigs[0].text[:160] if sigs else None,
        "scan_s": [round(x, 3) for x in scan_s],
        "find_signals_ms": [round(x * 1000, 2) for x in sig_s],
        "triage_s": [round(x, 3) for x in tri_s],
        "share_of_scan_median": round(med(sig_s) / med(scan_s), 5),
        "share_of_scan_worst": round(max(sig_s) / min(scan_s), 5),
        "share_of_triage_median": round(med(sig_s) / med(tri_s), 5),
        "scan_mb_per_s_median": round(nbytes / 1e6 / med(scan_s), 1),
    }


def _uptime() -> str:
    import subprocess

    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["clusters", "curve", "mining", "all"])
    ap.add_argument("--no-cache", action="store_true", help="triage the corpus again")
    ap.add_argument("--rules", type=Path, help="triage with this rule library (e.g. an older rules/)")
    ap.add_argument("--no-site", action="store_true", help="curve: the corpus alone, no invented failures")
    ap.add_argument(
        "--mark-wrong", action="store_true", help="curve: wrongly named logs join the inbox (marked wrong)"
    )
    ap.add_argument("--size", default="1G", help="mining: the generated log's size")
    ap.add_argument("--runs", type=int, default=3, help="mining: rounds")
    ap.add_argument("--jobs", type=int, default=1, help="mining: scan processes")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    import datetime as dt

    stamp = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "uptime": _uptime()}
    if args.what in ("clusters", "all"):
        r = {**stamp, **clusters(cache=not args.no_cache, rules=args.rules)}
        (OUT / ("learn-clusters-rules.json" if args.rules else "learn-clusters.json")).write_text(
            json.dumps(r, indent=2)
        )
        print(
            f"clusters ({r['logs']} logs, {r['invented']} invented; {r['unknowns']} unknown, "
            f"{r['no_signal_unknowns']} without a signal line)"
        )
        print(f"  list_clusters == group_failures: {r['service_equals_direct']}")
        for k in ("inbox", "inbox_without_no_signal_group", "invented_purity"):
            v = r[k]
            print(
                f"  {k}: purity {v['purity']} over {v['members']} in {v['clusters']} clusters; "
                f"split {len(v['split_labels'])}/{v['labels_with_2_plus']} labels {v['split_labels']}"
            )
            for imp in v["impure_clusters"][:8]:
                labs = dict(list(imp["labels"].items())[:6])
                print(
                    f"      impure {imp['id']} ({imp['size']}): {labs}"
                    + (" ..." if len(imp["labels"]) > 6 else "")
                )
        print(f"  invented failures with no signal line (in t:none): {r['invented_without_signal']}")
        mixed = [(m["id"], sum(m["labels"].values())) for m in r["invented_clusters_mixed_with_corpus"]]
        print(f"  invented failures in clusters with corpus logs (id, size): {mixed}")
        for k, v in r["similar_by_link"].items():
            print(f"  similar top-3 links with {k}: {v['right']}/{v['links']} = {v['precision']}")
        for k, v in r["similar_top3"].items():
            print(
                f"  similar top-3 [{k}]: {v['right']}/{v['links']} = {v['precision']} "
                f"({v['analyses_with_links']} analyses with links)"
            )
    if args.what in ("curve", "all"):
        r = {**stamp, **curve(rules=args.rules, with_site=not args.no_site, mark_wrong=args.mark_wrong)}
        r["mark_wrong"] = args.mark_wrong
        name = (
            "learn-curve"
            + ("-nosite" if args.no_site else "")
            + ("-rules" if args.rules else "")
            + ("-wrong" if args.mark_wrong else "")
            + ".json"
        )
        (OUT / name).write_text(json.dumps(r, indent=2))
        print(
            f"curve ({r['logs']} logs, {r['invented']} invented, library {r['library']} "
            f"{r['rules_dir']}, {r['seconds']} s)"
        )
        print(
            f"  top-1: first contact {r['first_contact_top1']}, replay with teaching {r['replay_top1']}, "
            f"all again with the final pack {r['final_pack_top1']}; rules taught {r['rules_taught']}, "
            f"declined {len(r['declined'])}"
        )
        for s in r["by_set"]:
            print(
                f"  {s['set']:10} {s['logs']:4} logs  first {s['first_contact']:.3f}  "
                f"replay {s['replay_with_teaching']:.3f}  final pack {s['final_pack']:.3f}  "
                f"rules by end {s['rules_taught_by_end']}"
            )
        print("  log  rules  running top-1 (teaching)  running top-1 (first contact)")
        for row in r["rows"]:
            if row["log"] % 60 == 0 or row["log"] == r["logs"]:
                print(
                    f"  {row['log']:4}  {row['rules_taught']:5}  {row['running_top1']:.4f}  "
                    f"{row['running_top1_first_contact']:.4f}"
                )
        for t in r["taught"]:
            print(
                f"  taught at log {t['at']}: {t['rule_id']} -> {t['class']} ({t['labels']}) "
                f"named {t['retriaged_named']}/{len(t['members'])}"
            )
        for d in r["declined"]:
            print(f"  declined at log {d['at']}: {d['labels']} {d['why'][:120]}")
        print(f"  right at first contact, wrong with the final pack: {r['broken_by_pack']}")
        print(f"  the replay's misses: {r['misses_why']}")
    if args.what in ("mining", "all"):
        r = {**stamp, **mining(size=args.size, runs=args.runs, jobs=args.jobs)}
        (OUT / "learn-mining.json").write_text(json.dumps(r, indent=2))
        print(
            f"mining ({r['bytes']} bytes, jobs {r['jobs']}, {r['tail_lines']} tail lines, "
            f"{r['signals']} signals)"
        )
        print(f"  scan s {r['scan_s']}  find_signals ms {r['find_signals_ms']}  triage s {r['triage_s']}")
        print(
            f"  find_signals / scan: median {r['share_of_scan_median']:.4%}, "
            f"worst {r['share_of_scan_worst']:.4%}; target < 5%"
        )
    print(stamp["uptime"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
