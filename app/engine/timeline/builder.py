"""When, where and why a job stopped: per-rank timeline, collective forensics, fail-slow.

Built from what the scan kept (app.engine.pipeline.scan): the *probe* lines (watchdog, PG status,
collective fingerprints, gloo timeouts, wherever they are in the logs), each file's last lines
and its training metrics. Pure: no I/O.

Collective forensics reads plain logs, no flight-recorder dump needed. Per process group and
rank: the collective each rank timed out on (SeqNum, OpType, NumelIn/Out) and its last enqueued
and last completed work. Then:
- ranks blocked on the *same* sequence number with a different op or size: the ranks disagree on
  the collective (a code desync: `dist.collective_mismatch`); the rank that enqueued more ran ahead;
- ranks blocked on *different* sequence numbers: one rank issued fewer (or more) collectives than
  the others: a collective was skipped (or added) on it, also a code desync; the rank that issued
  fewer is named;
- every rank still on its first collective (last completed -1): a peer that never reached it, or
  NCCL's transport between the GPUs (the rendezvous had worked: the group exists);
- every rank on the same collective, same op and size: the job waited for something outside these
  lines (a straggler or a dead rank elsewhere, hardware or network); the ranks that never reported
  a timeout, or went silent first, are named.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.pipeline.tailmarks import marked
from app.engine.timeline import clockskew, flight
from app.engine.timeline.clock import parse_time, year_of
from app.engine.timeline.failslow import fail_slow
from app.engine.timeline.forensics import (
    OBJECT_COLLECTIVES,
    CallSite,
    call_sites,
    later_in_same_function,
    normalise,
    ordering,
)
from app.engine.timeline.model import (
    _FAILURE,
    _NOISE,
    CollectiveRow,
    Line,
    RankState,
    Timeline,
    Verdict,
    phase_field,
    phase_of,
)
from app.engine.timeline.stacks import stack_autopsy

# --- probes: scanned everywhere by the main multi-pattern pass ------------------------------------

# torchrun's "--tee"/log-prefix "[rank7]:" carries the global rank ("[default7]:" is the local one)
_TORCHRUN_RANK = re.compile(r"\[rank(\d+)\]:")
_PG_RANK = r"\[PG (?:ID )?(?P<pg>\d+)(?!\d)[^\]]*?Rank (?P<prank>\d+)\]"
# torch 2.6 prints a barrier's fingerprint without a separator or shapes:
# "CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER)"; torch < 2.0 has no sequence number:
# "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[6], TensorDtypes=Double, ...)"
_FP = (
    r"CollectiveFingerPrint\((?:SequenceNumber=(?P<s{0}>\d+)(?:, )?)?OpType=(?P<o{0}>\w+)"
    r"(?:, TensorShape=\[(?P<shape_{0}>[^\]]*)\])?"
)
PROBES: dict[str, str] = {
    "watchdog": (
        r"(?:\[(?:PG (?:ID )?(?P<pg>\d+)(?!\d)[^\]]*?)?Rank (?P<prank>\d+)\] )?"
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
        r"(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?, "
        r"Timeout\(ms\)=(?P<timeout_ms>\d+)\)"
        r" ran for (?P<ran_ms>\d+) milliseconds"
    ),
    "pg_status": (
        _PG_RANK + r"[^\n]*?[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d+), "
        r"last completed (?:NCCL )?work: (?P<done>-?\d+)"
    ),
    "fingerprint": (
        r"Detected mismatch between collectives on ranks\. Rank (?P<ra>\d+) is running collective: "
        + _FP.format("a")
        + r".*?, but Rank (?P<rb>\d+) is running collective: "
        + _FP.format("b")
    ),
    "gloo_timeout": r"Timed out waiting (?P<timeout_ms>\d+)ms for (?P<op>recv|send) operation to complete",
    # gloo's pair.cc when a peer sends more than the op expects (gloo names it a collective mismatch)
    "gloo_mismatch": r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)",
    "monitored_barrier": r"Ranks? (?P<ranks>\d+(?:, \d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms",
}

_WORDED = re.compile(r"[^\W_]")  # a letter or a digit
# the label a process puts on its own lines: torchrun's "[rank3]:" prefix, the watchdog's
# "[Rank 3]" and "[PG ID 2 PG GUID 9 Rank 3]"
_SELF_LABEL = re.compile(r"\[(?:PG [^\]]{0,60}?)?[Rr]ank ?(\d{1,6})\]")
# a logger's level, rank tag and name before the message ("INFO [rank1] trainer: ")
_LOGGER_HEAD = re.compile(r"^\s*(?:[A-Z]+\s+)?(?:\[rank\d+\]\s+)?(?:[\w.-]+:\s)?")

# --- building ----------------------------------------------------------------------------------


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def collectives(probes: Iterable[tuple[str, str, Any]], year: int | None) -> list[CollectiveRow]:
    """Per (pg, rank): the collective it timed out on and its PG status, from probe hits
    (name, file, HitRecord)."""
    rows: dict[tuple[str, int], CollectiveRow] = {}
    for name, file, rec in probes:
        if name not in ("watchdog", "pg_status"):
            continue
        g = rec.groups
        rank = _int(g.get("prank"))
        sub: int | None = None
        prefixed = _TORCHRUN_RANK.search(rec.text)
        if rank is not None and prefixed is not None and int(prefixed.group(1)) != rank:
            # "[rank7]:... [Rank 1] Watchdog caught ...": rank 1 of a subgroup (sequence or tensor
            # parallel) on global rank 7; key the row by the global rank
            sub, rank = rank, int(prefixed.group(1))
        if rank is None:
            rank = rec.ctx.rank
        if rank is None:
            continue
        pg = g.get("pg") or "0"
        row = rows.setdefault((pg, rank), CollectiveRow(rank=rank, pg=pg, pg_known=bool(g.get("pg"))))
        if sub is not None:
            row.subgroup_rank = sub
        t = parse_time(rec.text, year_hint=year)
        if name == "watchdog" and row.seq is not None and _int(g.get("seq")) != row.seq and not g.get("pg"):
            # one rank timing out on several sequence numbers without a group id: the lines come
            # from several process groups, so no sequence comparison across ranks holds
            row.pg_known = False
        if name == "watchdog":
            row.repeats = max(row.repeats, rec.ctx.repeats)
        if name == "watchdog" and row.seq is None:
            row.seq = _int(g.get("seq"))
            row.op = g.get("op")
            row.numel_in = _int(g.get("numel_in"))
            row.numel_out = _int(g.get("numel_out"))
            row.timeout_ms = _int(g.get("timeout_ms"))
            row.time = t
            row.where = Line(file, rec.line, rec.text, t)
        elif name == "pg_status" and row.last_enqueued is None:
            row.last_enqueued = _int(g.get("enq"))
            row.last_completed = _int(g.get("done"))
            if row.time is None:
                row.time = t
    # a PG status line without its pg id matches a watchdog row of pg 0 ("[Rank 1] Watchdog ...")
    for (pg, rank), row in list(rows.items()):
        if row.seq is None and pg != "0" and ("0", rank) in rows and rows[("0", rank)].last_enqueued is None:
            rows[("0", rank)].last_enqueued = row.last_enqueued
            rows[("0", rank)].last_completed = row.last_completed
            if row.subgroup_rank is not None:
                rows[("0", rank)].subgroup_rank = row.subgroup_rank
            if row.pg_known:
                rows[("0", rank)].status_pg = pg  # the group the status line names
            del rows[(pg, rank)]
    return list(rows.values())


def _size(r: CollectiveRow) -> str:
    if r.numel_in is None:
        return f"{r.op}"
    return f"{r.op} of {r.numel_in:,} elements"


def judge_collectives(
    rows: Sequence[CollectiveRow], known_ranks: set[int], states: dict[int, RankState] | None = None
) -> list[Verdict]:
    """Verdicts from the collective table. Rows with a sequence number are ranks whose watchdog
    fired on that collective; rows without one only carry a rank's PG status (the line every
    rank prints when it dumps its flight recorder on another rank's signal)."""
    out: list[Verdict] = []
    by_pg: dict[str, list[CollectiveRow]] = defaultdict(list)
    status: dict[str, list[CollectiveRow]] = defaultdict(list)
    # a line names a process group other than the default one: a timeout's members need not be
    # the ranks numbered below it
    subgroups = any((r.pg_known and r.pg != "0") or r.status_pg not in (None, "0") for r in rows)
    for r in rows:
        (by_pg if r.seq is not None else status)[r.pg].append(r)
    for pg, group in sorted(by_pg.items()):
        group.sort(key=lambda r: r.rank)
        ev = [r.where for r in group if r.where is not None][:4]
        seqs = {r.seq for r in group}
        timed = {r.rank for r in group}
        others = [r for r in status.get(pg, []) if r.rank not in timed]
        if (
            len(group) > 1
            and any(r.subgroup_rank is not None for r in group)
            and not all(r.pg_known for r in group)
        ):
            # subgroup ranks whose watchdog lines do not name their group: they may sit in
            # different subgroups (each tensor- or expert-parallel group counts on its own)
            summary = (
                f"{_who(sorted(timed))} timed out in process subgroups the watchdog lines do not name "
                f"(sequence numbers {', '.join(str(r.seq) for r in group[:6])}): they cannot be "
                "compared across ranks"
            )
            out.append(Verdict("uniform", summary, [], seq=group[0].seq, evidence=ev))
            continue
        if len(seqs) == 1:
            seq = group[0].seq
            assert seq is not None
            shapes = Counter((r.op, r.numel_in) for r in group)
            if len(group) >= 2 and len(shapes) > 1:
                common = shapes.most_common(1)[0][0]
                odd = [r.rank for r in group if (r.op, r.numel_in) != common] or [group[-1].rank]
                enq = {r.rank: r.last_enqueued for r in group if r.last_enqueued is not None}
                ahead = max(enq, key=lambda k: enq[k]) if len(set(enq.values())) > 1 else None
                desc = " vs ".join(f"rank {r.rank}: {_size(r)}" for r in group[:6])
                summary = (
                    f"ranks disagree on the collective at sequence {seq} ({desc}): a code desync, "
                    "not a network fault"
                )
                if ahead is not None:
                    summary += f"; rank {ahead} ran ahead (last enqueued {enq[ahead]} vs {min(enq.values())})"
                    odd = [ahead]
                out.append(_desync("mismatch", summary, odd, seq, ev))
                continue
            if all(r.last_completed == -1 for r in group if r.last_completed is not None) and any(
                r.last_completed is not None for r in group
            ):
                out.append(
                    Verdict(
                        "first_collective",
                        f"the first collective (sequence {seq}) never completed on any rank that reports it: "
                        "the process group was set up and the work enqueued, so the rendezvous had worked; "
                        "a peer never reached this collective (it failed or hung before it) or NCCL could "
                        "not move data between the GPUs (its transport: P2P, shared memory or the network)",
                        [],
                        seq=seq,
                        evidence=ev,
                    )
                )
                continue
            # the ranks that only reported their PG status: they either completed this collective
            # (then they ran another one against it: a desync) or never enqueued it (they lag)
            done = sorted(r.rank for r in others if r.last_completed is not None and r.last_completed >= seq)
            never = sorted(r.rank for r in others if r.last_enqueued is not None and r.last_enqueued < seq)
            ev += [r.where for r in others if r.where is not None][:2]
            if done:
                waiting = sorted(timed)
                summary = (
                    f"collective {seq} completed on {_who(done)} but never on rank(s) "
                    f"{_names(waiting)} ({_size(group[0])}): the ranks did not run the same collective "
                    "at that point, a code desync"
                )
                out.append(_desync("completion", summary, waiting, seq, ev))
                continue
            missing = sorted(set(never) | (known_ranks - timed - {r.rank for r in others}))
            folded = sum(r.repeats for r in group if r.repeats > 1)
            if folded:
                # Ray folded other processes' lines into these: the ranks that timed out are more
                # than the log names, and a rank of the log that seems absent may be among them
                missing = sorted(never)
            if len(group) == 1 and not never and folded:
                lone = group[0]
                summary = (
                    f"rank {lone.rank} timed out (sequence {seq}, {_size(lone)}), and its line stands for "
                    f"{folded} alike lines across the Ray cluster (`[repeated {folded}x across cluster]`): "
                    f"more ranks than rank {lone.rank} timed out on this collective, their rank numbers "
                    "hidden by Ray's log dedup"
                )
                out.append(Verdict("uniform", summary, [], seq=seq, evidence=ev))
                continue
            if len(group) == 1 and not never:
                missing = sorted(known_ranks - timed)
                summary = f"only rank {group[0].rank} timed out (sequence {seq}, {_size(group[0])})"
                if group[0].subgroup_rank is not None:
                    # a subgroup's collective: the ranks of the log need not be members of it
                    missing = []
                    summary = (
                        f"only rank {group[0].rank} (rank {group[0].subgroup_rank} of its process group) "
                        f"timed out (sequence {seq}, {_size(group[0])}); the other members of that "
                        "group are not in this log"
                    )
                if missing:
                    summary += f"; {_who(missing)} never joined it: they lag or stopped"
                out.append(Verdict("straggler", summary, missing, seq=seq, evidence=ev))
                continue
            # in a log of several ranks' lines (no per-rank files), a rank below the highest one that
            # timed out and seen nowhere printed no timeout of its own: it never reached the collective,
            # or its output is not in this log (the lines name ranks; they do not say the world size)
            unseen: list[int] = []
            if not folded and not never and not subgroups and all(r.subgroup_rank is None for r in group):
                unseen = sorted(set(range(max(timed))) - known_ranks - timed)
                missing = sorted(set(missing) | set(unseen))
            same = "the same collective" if len(timed) > 1 else "collective"
            summary = f"{_who(sorted(timed))} timed out on {same} {seq} ({_size(group[0])})"
            if folded:
                summary += (
                    f", and Ray's log dedup folded {folded} alike lines into theirs (its "
                    "`[repeated ...x across cluster]` suffix): more ranks timed out than the log names"
                )
            if never:
                enq_of = {r.rank: r.last_enqueued for r in others}
                last = ", ".join(f"{enq_of[r]}" for r in never)
                summary += (
                    f"; {_who(never)} never issued it (last enqueued {last}): "
                    f"{'it lags' if len(never) == 1 else 'they lag'} - a straggler, or stuck outside NCCL"
                )
            elif missing and unseen:
                seen_missing = [r for r in missing if r not in unseen]
                if seen_missing:
                    summary += f"; {_who(seen_missing)} never reached it"
                summary += (
                    f"; {_who(unseen)} printed nothing here, no timeout of its own: it never reached "
                    "the collective, or its output is not in this log"
                )
            elif missing:
                summary += f"; {_who(missing)} never reached it"
            else:
                summary += (
                    ": the job waited on something outside these lines (another rank, the network or a GPU)"
                )
            out.append(
                Verdict("uniform" if not never else "straggler", summary, missing, seq=seq, evidence=ev)
            )
        else:
            seq_of = {r.rank: r.seq for r in group if r.seq is not None}
            lo, hi = min(seq_of.values()), max(seq_of.values())
            behind = [rk for rk, s in seq_of.items() if s == lo]
            front = [rk for rk, s in seq_of.items() if s == hi]
            enqueued = {r.last_enqueued for r in group}
            if None not in enqueued and len(enqueued) == 1:
                # every rank issued the same number of collectives; they differ only in how far
                # the GPU got (a broadcast root or a ring neighbour finishes its part first)
                summary = (
                    f"{_who(sorted(timed))} issued the same collectives (last enqueued {enqueued.pop()}) "
                    f"but {_who(behind)} completed fewer (blocked on sequence {lo}, the others on {hi}): "
                    "the job waited on something outside them (a slow or dead rank, the network, a GPU)"
                )
                out.append(Verdict("straggler", summary, behind, seq=lo, evidence=ev))
                continue
            if None in enqueued and not all(r.pg_known for r in group):
                # watchdog lines without a group id may come from different process groups
                # (data, tensor, pipeline parallel), whose sequence numbers are unrelated
                summary = (
                    f"{_who(sorted(timed))} timed out on sequence numbers {lo} to {hi}; the lines do not "
                    "name their process group, so they cannot be compared across ranks"
                )
                out.append(Verdict("uniform", summary, [], seq=lo, evidence=ev))
                continue
            caught_up = _caught_up_after(group, behind=behind, front=front)
            if caught_up:
                # the ranks ahead started their collective only after the others had given up:
                # they were behind when the job stalled and caught up later (the first timeout's
                # collective completed against a rank not yet torn down), not a skipped collective
                first = min((r for r in group if r.rank in behind), key=lambda r: r.time or 0.0)
                summary = (
                    f"{_who(behind)} timed out first, on sequence {lo} ({_size(first)}); {_who(front)} "
                    f"issued sequence {hi} only after that, and timed out later ({caught_up}): "
                    f"{'it was' if len(front) == 1 else 'they were'} behind when the job stalled - a "
                    "straggler, or stuck outside NCCL, not a skipped collective"
                )
                out.append(Verdict("straggler", summary, front, seq=lo, evidence=ev))
                continue
            summary = (
                f"ranks are blocked on different collectives: {_who(behind)} on sequence {lo}, "
                f"{_who(front)} on {hi}: {_who(behind)} issued {hi - lo} collective(s) fewer - one "
                "was skipped there (or added on the others), a code desync"
            )
            out.append(_desync("desync", summary, behind, lo, ev))
    return out


def _caught_up_after(group: list[CollectiveRow], *, behind: list[int], front: list[int]) -> str:
    """How much later the ranks ahead started the collective they timed out on than the ranks
    behind timed out ("" when they did not, or the lines lack the times): a rank that only
    issued its collective after the others had already given up was behind when the job
    stalled. In a desync every rank is stuck from about the same moment."""
    first_out = min((r.time for r in group if r.rank in behind and r.time is not None), default=None)
    starts = [
        r.time - r.timeout_ms / 1000
        for r in group
        if r.rank in front and r.time is not None and r.timeout_ms is not None
    ]
    if first_out is None or len(starts) < len(front) or min(starts) <= first_out:
        return ""
    return f"it started {min(starts) - first_out:.0f} s after the first timeout"


def _names(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, ranks))


def _who(ranks: Iterable[int]) -> str:
    """'rank 1' or 'ranks 1, 3'."""
    rs = list(ranks)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {_names(rs)}"


def _desync(kind: str, summary: str, ranks: list[int], seq: int | None, ev: list[Line]) -> Verdict:
    return Verdict(
        kind, summary, ranks, "dist.collective_mismatch", seq, evidence=ev, trigger="collective_desync"
    )


def fingerprint_verdicts(probes: Iterable[tuple[str, str, Any]], year: int | None) -> list[Verdict]:
    out = []
    seen: set[tuple[str, str]] = set()
    for name, file, rec in probes:
        if name != "fingerprint":
            continue
        g = rec.groups
        key = (g.get("ra", ""), g.get("rb", ""))
        if key in seen:
            continue
        seen.add(key)
        a, b = (
            f"rank {g.get('r' + x)}: {g.get('o' + x)}"
            + (f" [{g['shape_' + x]}]" if g.get("shape_" + x) is not None else "")
            for x in "ab"
        )
        where = f" at sequence {g.get('sa')}" if g.get("sa") is not None else ""
        if g.get("sa") != g.get("sb") and g.get("sa") is not None and g.get("sb") is not None:
            a, b, where = f"{a} at sequence {g.get('sa')}", f"{b} at sequence {g.get('sb')}", ""
        out.append(
            Verdict(
                "mismatch",
                f"torch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL) found ranks running different "
                f"collectives{where}: {a} vs {b}",
                [],
                "dist.collective_mismatch",
                _int(g.get("sa")),
                evidence=[Line(file, rec.line, rec.text, parse_time(rec.text, year_hint=year))],
                trigger="collective_desync",
            )
        )
    return out


_ERROR = re.compile(
    r"Traceback \(most recent|\w(?:Error|Exception)\b|Watchdog caught|[Tt]imed out|what\(\):|"
    r"terminate called|FAILED|failed to pass monitoredBarrier|Connection (?:reset|closed|refused)"
)
_COMM_ERROR = re.compile(
    r"[Tt]imed out|[Tt]imeout\b(?![=:\s]*[\d.])|Connection (?:reset|closed)|closed by peer|DistBackendError|"
    r"NCCL error|ncclRemoteError|Watchdog caught|collective mismatch|Broken pipe|remote process exited|"
    r"[Gg]loo"
)
_PEER_LOST = re.compile(
    r"Connection (?:reset|closed) by peer|closed by peer|remote process exited|Broken pipe"
)


def _rank_states(scans: Sequence[Any], year: int | None) -> dict[int, RankState]:
    from app.engine.pipeline.lines import lines_naming_ranks, parse_context

    states: dict[int, RankState] = {}
    progress: dict[int, list[tuple[float, int, int, str]]] = defaultdict(list)
    site_lines: list[tuple[str, int, int | None, str]] = []
    for fi, scan in enumerate(scans):
        carried = -math.inf  # lines without a time sort after the last timed line of their file
        in_trace: set[int] = set()  # ranks inside a traceback or stack dump: its lines are not progress
        named = lines_naming_ranks([text for _, text in scan.tail])
        hint = scan.rank_hint
        if hint is not None and any(
            (m := _SELF_LABEL.search(scan.tail[i][1])) is not None and int(m.group(1)) != hint for i in named
        ):
            # the name says one rank, but its lines carry other ranks' own labels: a merged log (or
            # a name that only mentions a rank), so its unlabelled lines belong to no rank we know.
            # (A rank's own file names peers only in prose, "aborted on rank 1", never in a label.)
            hint = None
        # without a rank from its file, only lines that name one can be attributed to a rank
        lines = scan.tail if hint is not None else [scan.tail[i] for i in named]
        for lineno, text in lines:
            if text.startswith(("[FR rank", "# PyTorch flight recorder")):
                continue  # a rendered flight-recorder dump (timeline/flight.py): not the rank's output
            ctx = parse_context(text)
            rank = ctx.rank if ctx.rank is not None else hint
            if rank is None:
                continue
            st = states.setdefault(rank, RankState(rank))
            if scan.name not in st.files:
                st.files.append(scan.name)
            if ctx.where:
                st.hosts.add(ctx.where)
            message = ctx.message
            site_lines.append((scan.name, lineno, rank, message))
            t = parse_time(text, year_hint=year)
            if t is not None:
                carried = t
                st.first_time = t if st.first_time is None else min(st.first_time, t)
                st.last_time = t if st.last_time is None else max(st.last_time, t)
            line = Line(scan.name, lineno, text, t)
            st.last_line = line
            if (
                message.startswith(("Traceback (most recent", "Stack trace of"))
                or "Stack trace of" in message
            ):
                in_trace.add(rank)
            elif rank in in_trace and message[:1] not in (" ", "\t", "#") and message.strip():
                in_trace.discard(rank)  # the exception line ends it
                st.failed = st.failed or bool(_ERROR.search(message))
                continue
            if rank in in_trace:
                continue
            if _FAILURE.search(message):
                if _ERROR.search(message):
                    st.failed = True
                if t is not None and (st.failure_time is None or t < st.failure_time):
                    st.failure_time = t
                continue
            if "phase" in message:
                hinted = phase_field(message)
                if hinted:
                    st.phase_hint = hinted
            if _NOISE.search(message) or (t is None and not message.strip()):
                continue
            progress[rank].append((carried, fi, lineno, normalise(message)))
            prev = st.last_activity
            # across a rank's files (stdout and stderr) the later by time wins; without times,
            # the later line of the same file
            if not _WORDED.search(_LOGGER_HEAD.sub("", message, count=1)):
                # a separator (a row of asterisks, dashes): progress, but no line to quote as
                # the rank's last sign of life
                continue
            if (
                prev is None
                or (t is not None and (prev.time is None or t >= prev.time))
                or (t is None and prev.time is None and prev.file == scan.name)
            ):
                if (
                    t is not None
                    and prev is not None
                    and prev.time is not None
                    and t - prev.time > st.stall_s
                ):
                    st.stall, st.stall_s = prev, t - prev.time
                st.last_activity = line
    for rank, items in progress.items():
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        states[rank].progress.lines = [x[3] for x in items]
    for rank, site in call_sites(site_lines).items():
        if rank in states:
            states[rank].site = site
            if site.error:
                states[rank].failed = True
    fails = [st.failure_time for st in states.values() if st.failed and st.failure_time is not None]
    for st in states.values():
        if st.last_activity is not None:
            st.phase = phase_of(st.last_activity.text)
        st.phase = st.phase_hint or st.phase
        if (
            not st.failed
            and fails
            and st.stall is not None
            and st.stall.time is not None
            and st.stall_s >= VANISHED_GAP_S
            and st.stall.time < min(fails) < st.stall.time + st.stall_s
        ):
            # it was silent when the others failed and printed again only later (it woke up after
            # their timeout): it lagged where that silence began, not where its last lines are
            st.stalled_at = phase_of(st.stall.text)
            st.phase = st.stalled_at or st.phase
    return states


def silent_verdict(states: dict[int, RankState], base: Verdict | None) -> Verdict | None:
    """A rank whose last activity is well before the others' failure: it stopped first."""
    last: dict[int, float] = {}
    for r, s in states.items():
        if s.last_activity is not None and s.last_activity.time is not None:
            last[r] = s.last_activity.time
    if len(last) < 2:
        return None
    order = sorted(last, key=lambda r: last[r])
    first, rest = order[0], order[1:]
    gap = min(last[r] for r in rest) - last[first]
    fails = [s.failure_time for s in states.values() if s.failure_time is not None]
    if gap < 5.0 or (fails and min(fails) < last[first]):
        return None  # no clear gap, or something failed before it went quiet
    st = states[first]
    act = st.last_activity
    assert act is not None
    summary = (
        f"rank {first} stopped logging {gap:.0f} s before the other ranks; its last line was "
        f"{act.text.strip()[:160]!r} ({act.file}:{act.line})"
    )
    if st.phase:
        summary += f", in the {st.phase} phase"
    return Verdict("silent_rank", summary, [first], phase=st.phase, evidence=[act])


VANISHED_GAP_S = 10.0  # the others went on printing at least this long after its last line


def quiet_verdict(
    states: dict[int, RankState], timed_out: dict[int, str], exits: dict[int, LauncherExit] | None = None
) -> Verdict | None:
    """Ranks that printed no error while the others failed in a collective: they are what the
    others waited for. When such a rank printed nothing at all (not even a heartbeat) for a
    while before the others gave up, or the others lost the connection to it, its process ended
    without a word (`nccl.error`: remote process exited); otherwise it lagged or hung.
    `timed_out`: ranks whose collective timed out per the probes (watchdog, gloo), described.
    `exits`: torchrun's failure table: a quiet rank the launcher ended with SIGTERM after another
    failed was alive until then (stuck, not dead), whatever its silence suggests."""
    if len(states) < 2:
        return None
    failed = {r: s for r, s in states.items() if s.failed}
    quiet = sorted(r for r, s in states.items() if not s.failed and s.last_line is not None)
    if not failed or not quiet:
        return None
    comm = [
        s for s in failed.values() if s.site is not None and s.site.error and _COMM_ERROR.search(s.site.error)
    ]
    comm += [
        s for s in failed.values() if s.site is not None and s.site.source == "watchdog" and s not in comm
    ]
    described = {s.rank: f"rank {s.rank} ({s.site.describe()})" for s in comm if s.site is not None}
    for r, what in timed_out.items():
        if r in states and r not in quiet:
            described.setdefault(r, f"rank {r} ({what})")
    if not described:
        return None
    peer_lost = any(s.site is not None and s.site.error and _PEER_LOST.search(s.site.error) for s in comm)
    ends = [s.last_time for r, s in states.items() if r not in quiet and s.last_time is not None]
    exits = exits or {}
    gone = []
    for r in quiet:
        t = states[r].last_time
        if r in exits and exits[r].terminated and not exits[r].first:
            continue  # the launcher's teardown ended it: it was alive when the others failed
        if peer_lost or (t is not None and ends and max(ends) - t >= VANISHED_GAP_S):
            gone.append(r)
    terminated = [r for r in quiet if r in exits and exits[r].terminated and not exits[r].first]

    act = states[quiet[0]].last_activity or states[quiet[0]].last_line
    assert act is not None
    waiting = ", ".join(described[r] for r in sorted(described)[:3])
    last = f"its last line: {act.text.strip()[:160]!r} ({act.file}:{act.line})"
    if gone == quiet:
        how = "lost the connection to it" if peer_lost else "timed out waiting for it"
        # what shows it died: the peers lost the connection, or torchrun's table has it ending on
        # its own (absent: exit 0; listed: a crash or a kill other than the teardown's SIGTERM)
        confirmed = peer_lost or (
            bool(exits) and all(r not in exits or not exits[r].terminated or exits[r].first for r in quiet)
        )
        if confirmed:
            summary = (
                f"{_who(quiet)} printed no error and nothing after its last line while {waiting} "
                f"{how}: the process of {_who(quiet)} ended without a message (killed, or exited "
                f"from the code); {last}"
            )
        else:
            summary = (
                f"{_who(quiet)} printed no error and nothing after its last line while {waiting} "
                f"{how}: nothing in these files says whether its process ended or hung without "
                f"printing (torchrun's failure table, the scheduler's exit codes or `dmesg` would); "
                f"{last}"
            )
        # inferred from silence alone it stays a statement of the timeline: the logged error
        # (the others' timeout) leads, and this is not made a cause that explains it
        return Verdict(
            "vanished",
            summary,
            quiet,
            "nccl.error" if confirmed else None,
            phase=states[quiet[0]].phase,
            evidence=[act],
            trigger="rank_exited" if confirmed else None,
        )
    summary = (
        f"{_who(quiet)} reported no error while {waiting} failed waiting in a collective: "
        f"{_who(quiet)} lagged or hung; {last}"
    )
    if terminated:
        ended = "; ".join(f"rank {r} {exits[r].describe()}" for r in terminated[:4])
        summary += (
            f"; torchrun ended {_who(terminated)} with SIGTERM after the others failed ({ended}): "
            "it was still running, stuck, not dead"
        )
    st = states[quiet[0]]
    if st.stalled_at is not None and st.stall is not None:
        summary += f"; it printed nothing for {st.stall_s:.0f} s after {st.stall.text.strip()[:120]!r}"
    return Verdict("straggler", summary, quiet, phase=st.phase, evidence=[act])


def gloo_mismatch_verdicts(probes: Iterable[tuple[str, str, Any]], year: int | None) -> list[Verdict]:
    for name, file, rec in probes:
        if name != "gloo_mismatch":
            continue
        g = rec.groups
        rank = rec.ctx.rank
        got, want = g.get("got"), g.get("want")
        sizes = f" (it received {int(got):,} bytes where it expected {int(want):,})" if got and want else ""
        who = f"rank {rank}" if rank is not None else "a rank"
        summary = (
            f"gloo found {who} receiving data of another size than the collective it was running"
            f"{sizes}: the ranks ran different collectives, a code desync"
        )
        ev = [Line(file, rec.line, rec.text, parse_time(rec.text, year_hint=year))]
        return [_desync("mismatch", summary, [], None, ev)]
    return []


_GARBAGE = re.compile(
    r"out of memory|Tried to allocate|UnpicklingError|invalid load key|pickle data was truncated|"
    r"bad_alloc|negative dimension|Invalid buffer size|size mismatch",
    re.I,
)


def site_verdicts(states: dict[int, RankState]) -> list[Verdict]:
    """Desyncs the ranks' own stacks show: a rank that failed with nonsense sizes inside an
    object collective (its peers sent something else), or ranks that failed in collectives called
    from different places of the user's code."""
    out: list[Verdict] = []
    sites = {r: s.site for r, s in states.items() if s.site is not None}
    for r, cs in sorted(sites.items()):
        if cs.collective in OBJECT_COLLECTIVES and cs.error and _GARBAGE.search(cs.error):
            summary = (
                f"rank {r} failed inside {cs.describe()} with {cs.error[:140]!r}: the sizes it received "
                "were garbage because another rank ran a different collective at that point, a code desync"
            )
            ev = [Line(cs.file, cs.error_line or cs.line, cs.error, None)]
            v = _desync("mismatch", summary, [], None, ev)
            v.phase = _site_phase(cs)
            v.behind = [r]
            out.append(v)
    comm = {
        r: cs
        for r, cs in sites.items()
        if cs.collective is not None
        and cs.collective not in ("send", "recv", "isend", "irecv", "batch_isend_irecv")
        and (cs.source == "watchdog" or (cs.error is not None and _COMM_ERROR.search(cs.error)))
    }
    if len(comm) >= 2 and len({cs.key() for cs in comm.values()}) > 1:
        progress = {r: states[r].progress for r in comm}
        ahead, behind = ordering(progress)
        later = later_in_same_function(comm)
        if ahead or later:
            named = ahead or later
            behind = behind or sorted(set(comm) - set(named))
            parts = "; ".join(f"rank {r} in {cs.describe()}" for r, cs in sorted(comm.items()))
            summary = (
                f"the ranks failed in different collectives ({parts}): they did not call the same "
                f"collectives, a code desync; {_who(named)} got further (skipped the call "
                f"the others wait in)"
            )
            # an error is quoted at its own line, a watchdog's stack described at the block's first
            ev = [
                Line(cs.file, cs.error_line or cs.line, cs.error, None)
                if cs.error
                else Line(cs.file, cs.line, cs.describe(), None)
                for cs in comm.values()
            ][:4]
            v = _desync("callsite", summary, named, None, ev)
            v.phase = next((p for r in behind + named if r in comm and (p := _site_phase(comm[r]))), None)
            out.append(v)
    return out


def _site_phase(cs: CallSite) -> str | None:
    u = cs.user
    if u is None:
        return None
    return phase_of(f"{u.func.replace('_', ' ')} {u.code}")


# torchrun's table as the launcher prints it, also behind a prefix on every line (a Ray or
# torchrun tag, a container runtime's timestamp, a glog header): searched, not anchored
# (torchrun's own --tee tag has no space after it: "[default1]:[0]:")
_TORCHRUN_ROOT = re.compile(r"(?<![^\s:\]])Root Cause \(first observed failure\):")
_TORCHRUN_OTHERS = re.compile(r"(?<![^\s:\]])Failures:\s*$")
_TR_ENTRY = re.compile(r"(?<![^\s:\]])\[\d+\]:\s*$")
_TR_FIELD = re.compile(r"(?<![^\s:\]])(?P<k>time|host|rank|exitcode|traceback)\s*: (?P<v>.*)$")
_TR_END = re.compile(r"(?<![^\s:\]])={20,}\s*$")
SIGTERM_EXIT = -15


@dataclass(frozen=True)
class LauncherExit:
    """One rank's line in torchrun's failure table (`ChildFailedError`): how its process ended."""

    rank: int
    exitcode: int | None
    traceback: str
    first: bool  # the "Root Cause (first observed failure)" entry
    line: int  # its exitcode row in its file (else where the entry starts)
    file: str
    time: str = ""  # as the table prints it ("2024-08-20_11:37:36")
    host: str = ""
    text: str = ""  # the entry's exitcode row, as evidence

    @property
    def terminated(self) -> bool:
        """Ended by the launcher's SIGTERM: torchrun tears the other workers down this way once
        one has failed, so the rank was alive (running or stuck) until then."""
        return self.exitcode == SIGTERM_EXIT or self.traceback.startswith("Signal 15 ")

    def describe(self) -> str:
        code = f"exitcode {self.exitcode}" if self.exitcode is not None else "exitcode ?"
        sig = f", {self.traceback}" if self.traceback.startswith("Signal") else ""
        return code + sig


def launcher_exits(scans: Sequence[Any]) -> dict[int, LauncherExit]:
    """torchrun's failure table, per rank (empty when the log has none). Ranks that exited 0 are
    not listed: in a log with a table, a rank missing from it ended on its own, without error."""
    # (file, section, first line, fields) per entry of the table; the exitcode row as evidence
    entries: list[tuple[str, str, int, dict[str, str]]] = []
    code_rows: dict[int, tuple[int, str]] = {}
    for scan in scans:
        section: str | None = None
        headed = False
        for lineno, text in marked(scan, "torchrun_table"):
            # the substring tests keep the searches off the many lines that cannot be table rows
            if ("Failures:" in text and _TORCHRUN_OTHERS.search(text)) or (
                "Root Cause" in text and _TORCHRUN_ROOT.search(text)
            ):
                section = "root" if "Root Cause" in text else "others"
                headed = True
            elif section is None and not headed and "]:" in text and _TR_ENTRY.search(text):
                # an excerpt that starts inside the table's "Failures:" part (its header cut off)
                section = "others"
                entries.append((scan.name, section, lineno, {}))
            elif section is not None and "]:" in text and _TR_ENTRY.search(text):
                entries.append((scan.name, section, lineno, {}))
            elif section is not None and "=====" in text and _TR_END.search(text):
                section = None
            elif section is not None and entries and " : " in text and (m := _TR_FIELD.search(text)):
                entries[-1][3].setdefault(m.group("k"), m.group("v").strip())
                if m.group("k") == "exitcode":
                    code_rows.setdefault(len(entries) - 1, (lineno, text))
    out: dict[int, LauncherExit] = {}
    for i, (file, section, start, fields) in enumerate(entries):
        rank = _int((fields.get("rank") or "").split(" ", 1)[0] or None)
        if rank is None or rank in out:
            continue
        code = _int((fields.get("exitcode") or "").split(" ", 1)[0] or None)
        row = code_rows.get(i)
        out[rank] = LauncherExit(
            rank,
            code,
            fields.get("traceback", ""),
            section == "root",
            row[0] if row else start,
            file,
            fields.get("time", ""),
            fields.get("host", ""),
            row[1] if row else "",
        )
    return out


# a Python process that raised (or called sys.exit with a code) ends with 1-125; 126-255 are the
# shell's "cannot run" codes and 128+N a signal as a shell reports it
_ERROR_EXIT = range(1, 126)


def launcher_verdict(
    exits: dict[int, LauncherExit], states: dict[int, RankState], timed_out: Collection[int] = ()
) -> Verdict | None:
    """torchrun's "Root Cause (first observed failure)": the rank the launcher saw fail first. It
    is the first to *exit*, not always the culprit (a straggler's peer times out first), so this
    verdict only names a rank when nothing else does, except in one case: that rank ended with an
    error status of its own (an exception: exit code 1, not a signal) while other ranks timed out
    in a collective and it did not. The others were waiting for the rank that had already gone,
    so its error is the cause (trigger `rank_failed_first`)."""
    first = next((e for e in exits.values() if e.first), None)
    if first is None:
        return None
    st = states.get(first.rank)
    summary = f"torchrun saw rank {first.rank} fail first ({first.describe()})"
    if first.exitcode in _ERROR_EXIT and timed_out and first.rank not in timed_out:
        where = "".join(
            part
            for part in (f" on {first.host}" if first.host else "", f" at {first.time}" if first.time else "")
        )
        waiting = sorted(timed_out)
        return Verdict(
            "first_failure",
            f"rank {first.rank} exited with code {first.exitcode}{where}, torchrun's first observed "
            f"failure, and did not time out itself; {_who(waiting)} then timed out waiting in a "
            "collective",
            [first.rank],
            "python.unhandled_exception",
            phase=st.phase if st else None,
            evidence=[Line(first.file, first.line, first.text, None)],
            trigger="rank_failed_first",
        )
    # the other ranks died of the same signal (not the launcher's SIGTERM): they failed together,
    # of something they share, and the first listed is only the first to be reaped
    same = sorted(
        e.rank
        for e in exits.values()
        if not e.first
        and e.exitcode == first.exitcode
        and first.exitcode is not None
        and first.exitcode < 0
        and not e.terminated
    )
    if same:
        summary += (
            f"; {_who(same)} exited the same way (exitcode {first.exitcode}): the ranks failed together, "
            f"rank {first.rank} is only the first listed"
        )
        return Verdict(
            "first_failure",
            summary,
            sorted([first.rank, *same]),
            phase=st.phase if st else None,
            evidence=[Line(first.file, first.line, "", None)],
        )
    if st is not None and st.last_activity is not None:
        summary += f"; its last line: {st.last_activity.text.strip()[:160]!r}"
    return Verdict(
        "first_failure",
        summary,
        [first.rank],
        phase=st.phase if st else None,
        evidence=[Line(first.file, first.line, "", None)],
    )


def _attribute(verdicts: list[Verdict], states: dict[int, RankState]) -> None:
    """Name the rank(s) of a desync verdict that says which collectives differ but not who ran
    ahead: the ranks whose own progress lines got further; and its phase: where the ranks that
    stayed behind wait (the call the others skipped)."""
    progress = {r: s.progress for r, s in states.items()}
    ahead, behind = ordering(progress) if len(progress) >= 2 else ([], [])
    for v in verdicts:
        if v.failure_class != "dist.collective_mismatch":
            continue
        # a rank the verdict itself places behind (it failed inside the collective) is not the
        # one that skipped it, however far its own progress lines got
        further = [r for r in ahead if r not in v.behind]
        if not v.ranks and further:
            v.ranks = further
            v.summary += f"; {_who(further)} got further than the others (skipped a collective)"
        elif not v.ranks and v.behind and len(progress) == 2:
            # two ranks: the one that ran the other collective is the one that did not fail in it
            other = sorted(set(progress) - set(v.behind))
            v.ranks = other
            v.summary += f"; {_who(other)} ran the other collective"
        if v.phase is None:
            order = (v.behind or behind) + v.ranks
            sites = [cs for r in order if r in states and (cs := states[r].site) is not None]
            v.phase = next((p for cs in sites if (p := _site_phase(cs))), None) or next(
                (states[r].phase for r in order if r in states and states[r].phase), None
            )


def _complete(verdicts: list[Verdict]) -> None:
    """A desync verdict that shows *what* differs but not *who* (two ranks, no majority) takes the
    rank(s) and phase another desync verdict names (the watchdogs' table, the ranks' stacks)."""
    desyncs = [v for v in verdicts if v.failure_class == "dist.collective_mismatch"]
    for v in desyncs:
        if v.ranks:
            continue
        other = next((o for o in desyncs if o is not v and o.ranks), None)
        if other is None:
            continue
        v.ranks = list(other.ranks)
        v.phase = v.phase or other.phase
        v.summary += f"; and {other.summary}"


def _lineno(row: tuple[int, str]) -> int:
    return row[0]


def _step_times(scans: Sequence[Any], year: int | None) -> dict[int, dict[int, float]]:
    """rank -> step -> the time of the first metric line of that step the rank printed."""
    out: dict[int, dict[int, float]] = defaultdict(dict)
    for scan in scans:
        steps = {mp.line: mp for mp in scan.metrics if mp.step is not None}
        if not steps:
            continue
        tail = scan.tail
        # the tail is in line order: find each step's line in it rather than walk all of it
        for lineno in sorted(steps):
            i = bisect.bisect_left(tail, lineno, key=_lineno)
            if i == len(tail) or tail[i][0] != lineno:
                continue
            mp, text = steps[lineno], tail[i][1]
            rank = mp.rank if mp.rank is not None else scan.rank_hint
            t = parse_time(text, year_hint=year)
            if rank is not None and t is not None:
                out[rank].setdefault(mp.step, t)
    return out


def build(scans: Sequence[Any]) -> Timeline:
    """The timeline of an analysis from its FileScans."""
    year = None
    for scan in scans:
        for _n, text in scan.tail:
            year = year_of(text)
            if year:
                break
        if year:
            break
    tl = Timeline(year=year)
    probes = [(name, scan.name, rec) for scan in scans for name, recs in scan.probes.items() for rec in recs]
    tl.ranks = _rank_states(scans, year)
    for scan in scans:
        for mp in scan.metrics:
            for name, value in mp.values.items():
                tl.series.setdefault(name, []).append((mp.step, value, None, mp.rank))
            if mp.step is not None and mp.rank is not None and mp.rank in tl.ranks:
                st = tl.ranks[mp.rank]
                st.last_step = mp.step if st.last_step is None else max(st.last_step, mp.step)
                st.progress.last_step = st.last_step
    tl.clock_offsets = clockskew.offsets(_step_times(scans, year), tl.ranks)
    clockskew.apply(tl.ranks, tl.clock_offsets)
    tl.collectives = collectives(probes, year)
    known = set(tl.ranks) | {r.rank for r in tl.collectives}
    # strongest first: torch's own check, gloo's size check, the watchdog table, the ranks' stacks
    fr_lines = [
        (scan.name, n, scan.rank_hint, text)
        for scan in scans
        for n, text in marked(scan, "flight_recorder")
        if text.startswith("[FR rank")
    ]
    fr = flight.judge(flight.entries(fr_lines)) if fr_lines else None
    verdicts = (
        fingerprint_verdicts(probes, year)
        + ([fr] if fr is not None else [])
        + gloo_mismatch_verdicts(probes, year)
        + judge_collectives(tl.collectives, known, tl.ranks)
    )
    verdicts += [v for v in site_verdicts(tl.ranks) if not any(x.failure_class for x in verdicts)]
    tl.stacks, stack_verdict = stack_autopsy(scans)
    if stack_verdict is not None:
        # py-spy stacks say where each rank is: they come before the watchdog's inference
        if stack_verdict.failure_class and not any(v.failure_class for v in verdicts):
            verdicts.insert(0, stack_verdict)
        else:
            verdicts.append(stack_verdict)
    _attribute(verdicts, tl.ranks)
    _complete(verdicts)
    timed_out = {r.rank: f"timed out in collective {r.seq}, {_size(r)}" for r in tl.collectives if r.seq}
    for name, _file, rec in probes:
        if name == "gloo_timeout" and rec.ctx.rank is not None:
            timed_out.setdefault(rec.ctx.rank, f"gloo timed out waiting for a {rec.groups.get('op')}")
    exits = launcher_exits(scans)
    # only subgroup ranks timed out (their "[Rank N]" is not torchrun's global rank): the quiet
    # ranks of the log need not be members of that group, so their silence says nothing
    timed_rows = [r for r in tl.collectives if r.seq]
    subgroup_only = bool(timed_rows) and all(r.subgroup_rank is not None for r in timed_rows)
    for extra in (
        None if subgroup_only else quiet_verdict(tl.ranks, timed_out, exits),
        silent_verdict(tl.ranks, verdicts[0] if verdicts else None),
    ):
        if extra is None:
            continue
        # a rank that went quiet is the lead, unless the collectives already proved a desync
        lead = verdicts[0] if verdicts else None
        if lead is None or (lead.failure_class is None and (not lead.ranks or extra.failure_class)):
            verdicts.insert(0, extra)
        else:
            verdicts.append(extra)
    first = launcher_verdict(exits, tl.ranks, timed_out)
    if first is not None:
        if first.failure_class and not any(v.failure_class for v in verdicts):
            verdicts.insert(0, first)
        else:
            verdicts.append(first)
    for v in verdicts:
        if v.phase is None and v.ranks:
            phases = [tl.ranks[r].phase for r in v.ranks if r in tl.ranks and tl.ranks[r].phase]
            if not phases and v.kind == "straggler":
                # a straggler that caught up and went on has no phase of its own at the end; the
                # ranks that waited for it are still where the job stalled
                phases = [st.phase for r, st in sorted(tl.ranks.items()) if r not in v.ranks and st.phase]
            v.phase = phases[0] if phases else None
    tl.verdicts = verdicts
    tl.slowdown = fail_slow(scans)
    if tl.slowdown is not None:
        slow = tl.slowdown
        ranks = [slow["slowest_rank"]] if slow.get("slowest_rank") is not None else []
        tl.verdicts.append(Verdict("fail_slow", slow["summary"], ranks, phase=slow.get("phase")))
    return tl
