"""PyTorch's NCCL flight recorder dumps, read as text.

With `TORCH_NCCL_TRACE_BUFFER_SIZE` (newer: `TORCH_FR_BUFFER_SIZE`) and `TORCH_NCCL_DUMP_ON_TIMEOUT`
set, every rank writes its last collectives to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` (default
`/tmp/nccl_trace_rank_<rank>`) when a watchdog fires: a pickle (or JSON) of
`{version, pg_config, pg_status, entries: [{collective_seq_id, profiling_name, input_sizes,
state, frames, ...}]}`. Users upload those files beside their logs. They are rendered here as one
text line per entry, which is what gets stored, shown and scanned (the timeline's `fr_*` probes):

    [FR rank 0] pg 0 seq 27 op nccl:all_gather in [[1]] out [[2, 1]] Long state completed
        at 2026-11-23T20:17:03.191Z stack gather_object < save_checkpoint (ckpt.py:32) < fit (...)

(one line in the rendition; folded here).

The pickle is read by an unpickler that refuses every class and callable (a dump is only dicts,
lists, strings and numbers), so an uploaded file cannot run code; its size is capped first.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.timeline.model import Line, Verdict, phase_of

MAX_DUMP_BYTES = 64 << 20
PICKLE_HEADS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_KEYS = {"entries", "pg_status"}
_LIBRARY_MARKS = ("site-packages", "dist-packages", "/torch/", "<frozen")


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: {module}.{name} (a flight-recorder dump holds data only)")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused: persistent id")


def read_dump(path: Path, *, rank: int | None) -> bytes | None:
    """A file's text rendition when it is a flight-recorder dump, else None."""
    try:
        if path.stat().st_size > MAX_DUMP_BYTES:
            return None
        with path.open("rb") as fh:
            head = fh.read(4096)
            if not looks_like_dump(head):
                return None
            data = head + fh.read()
    except OSError:
        return None
    dump = load(data)
    return render(dump, rank=rank).encode() if dump is not None else None


def as_text(data: bytes, *, rank: int | None) -> bytes | None:
    """Bytes held in memory as a dump's rendition, or None when they are not a pickled dump."""
    if not data.startswith(PICKLE_HEADS) or not looks_like_dump(data[:4096]):
        return None
    dump = load(data)
    return render(dump, rank=rank).encode() if dump is not None else None


def looks_like_dump(head: bytes) -> bool:
    """Whether a file's first bytes may be a flight-recorder dump (cheap; `load` decides)."""
    if head.startswith(PICKLE_HEADS):
        return b"entries" in head or b"version" in head or b"pg_config" in head
    return head.lstrip().startswith(b"{") and (b'"pg_status"' in head or b'"entries"' in head)


def load(data: bytes) -> dict[str, Any] | None:
    """The dump's dict, or None when the bytes are not one."""
    if len(data) > MAX_DUMP_BYTES:
        return None
    obj: Any
    try:
        if data.startswith(PICKLE_HEADS):
            obj = _DataOnly(io.BytesIO(data)).load()
        else:
            obj = json.loads(data.decode("utf-8"))
    except Exception:  # a malformed pickle raises whatever its opcodes trip over
        return None
    if not isinstance(obj, dict) or not set(obj) >= _KEYS or not isinstance(obj.get("entries"), list):
        return None
    return obj


def _sizes(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "))[:120] if v is not None else "?"


def _frames(frames: Any) -> str:
    """The Python frames innermost first as `func (file:line)`, torch's own frames reduced to a
    name, at most eight."""
    out: list[str] = []
    if not isinstance(frames, list):
        return ""
    for f in frames[:16]:
        if not isinstance(f, dict):
            continue
        name = str(f.get("name", "?"))
        file = str(f.get("filename", ""))
        if name in ("wrapper", "decorate_context", "_fn") and any(m in file for m in _LIBRARY_MARKS):
            continue
        if any(m in file for m in _LIBRARY_MARKS) or not file:
            out.append(name)
        else:
            out.append(f"{name} ({file.rsplit('/', 1)[-1]}:{f.get('line', '?')})")
        if len(out) == 8:
            break
    return " < ".join(out)


def _when(ns: Any) -> str:
    if not isinstance(ns, int) or ns <= 0:
        return "?"
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def render(dump: dict[str, Any], *, rank: int | None) -> str:
    """The dump as text lines (see the module's docstring)."""
    who = f"rank {rank}" if rank is not None else "rank ?"
    lines = [
        f"# PyTorch flight recorder dump ({who}, format {dump.get('version', '?')}, "
        f"comm library {dump.get('comm_lib_version', '?')}), rendered as text by logtriage"
    ]
    configs: dict[str, Any] = dump["pg_config"] if isinstance(dump.get("pg_config"), dict) else {}
    status: dict[str, Any] = dump["pg_status"] if isinstance(dump.get("pg_status"), dict) else {}
    for pg, st in sorted(status.items(), key=lambda kv: str(kv[0])):
        if not isinstance(st, dict):
            continue
        cfg = configs.get(pg)
        desc = f" ({cfg.get('desc')}, ranks {cfg.get('ranks')})" if isinstance(cfg, dict) else ""
        lines.append(
            f"[FR {who}] pg {pg}{desc} status last enqueued {st.get('last_enqueued_collective', '?')} "
            f"last started {st.get('last_started_collective', '?')} "
            f"last completed {st.get('last_completed_collective', '?')}"
        )
    for e in dump.get("entries") or []:
        if not isinstance(e, dict):
            continue
        pg = e.get("pg_id", "?")
        p2p = bool(e.get("is_p2p"))
        seq = e.get("p2p_seq_id" if p2p else "collective_seq_id", "?")
        dtypes = e.get("input_dtypes") or []
        dtype = str(dtypes[0]) if isinstance(dtypes, list) and dtypes else "?"
        lines.append(
            f"[FR {who}] pg {pg} {'p2p ' if p2p else ''}seq {seq} op {e.get('profiling_name', '?')} "
            f"in {_sizes(e.get('input_sizes'))} out {_sizes(e.get('output_sizes'))} {dtype} "
            f"state {e.get('state', '?')} at {_when(e.get('time_created_ns'))} "
            f"stack {_frames(e.get('frames')) or '?'}"
        )
    return "\n".join(lines) + "\n"


# --- judging the rendered lines ------------------------------------------------------------------

FR_LINE = re.compile(
    r"^\[FR rank (?P<rank>\d+|\?)\] pg (?P<pg>\S+) (?P<p2p>p2p )?seq (?P<seq>\d+) op (?P<op>\S+) "
    r"in (?P<inp>.+?) out (?P<out>.+?) (?P<dtype>\S+) state (?P<state>\w+) at (?P<at>\S+) "
    r"stack (?P<stack>.*)$"
)


@dataclass
class Entry:
    rank: int
    pg: str
    seq: int
    op: str
    sizes: str
    state: str
    stack: str
    where: Line

    def describe(self) -> str:
        op = self.op.removeprefix("nccl:").removeprefix("gloo:")
        return f"{op} of {self.sizes}" + (
            f" ({self.stack.split(' < ', 3)[:3][-1]})" if self.stack != "?" else ""
        )


def entries(lines: Iterable[tuple[str, int, int | None, str]]) -> list[Entry]:
    """The collective entries of rendered dumps: (file, lineno, rank hint, text)."""
    out = []
    for file, lineno, hint, text in lines:
        if not text.startswith("[FR rank"):
            continue
        m = FR_LINE.match(text)
        if m is None or m.group("p2p"):
            continue
        rank = int(m.group("rank")) if m.group("rank") != "?" else hint
        if rank is None:
            continue
        out.append(
            Entry(
                rank,
                m.group("pg"),
                int(m.group("seq")),
                m.group("op"),
                m.group("inp"),
                m.group("state"),
                m.group("stack"),
                Line(file, lineno, text, None),
            )
        )
    return out


def _call(stack: str) -> str:
    """The user-code function that made the call: the first frame with a file in it."""
    for part in stack.split(" < "):
        if "(" in part:
            return part
    return stack.split(" < ", 1)[0]


def judge(found: list[Entry]) -> Verdict | None:
    """The first collective (per process group) that the ranks' dumps disagree on: another op or
    another size at the same sequence number is a code desync."""
    by_pg: dict[str, dict[int, dict[int, Entry]]] = defaultdict(lambda: defaultdict(dict))
    for e in found:
        by_pg[e.pg][e.rank][e.seq] = e
    for pg, ranks in sorted(by_pg.items()):
        if len(ranks) < 2:
            continue
        common = set.intersection(*(set(seqs) for seqs in ranks.values()))
        for seq in sorted(common):
            row = {r: ranks[r][seq] for r in sorted(ranks)}
            shapes: dict[tuple[str, str], list[int]] = defaultdict(list)
            for r, e in row.items():
                shapes[(e.op, e.sizes)].append(r)
            if len(shapes) < 2:
                continue
            groups = sorted(shapes.values(), key=lambda rs: (len(rs), rs))
            odd = groups[0] if len(groups[0]) < len(groups[-1]) else []
            parts = "; ".join(
                f"rank {r}: {e.op.split(':')[-1]} of {e.sizes} in {_call(e.stack)}"
                for r, e in list(row.items())[:6]
            )
            summary = (
                f"the flight recorder dumps disagree at collective {seq} of process group {pg} ({parts}): "
                "the ranks ran different collectives, a code desync"
            )
            v = Verdict(
                "flight_recorder",
                summary,
                odd,
                "dist.collective_mismatch",
                seq,
                evidence=[e.where for e in row.values()][:4],
                trigger="collective_desync",
            )
            phases = [phase_of(_call(e.stack).replace("_", " ")) for e in row.values()]
            v.phase = next((p for p in phases if p), None)
            return v
    return None
