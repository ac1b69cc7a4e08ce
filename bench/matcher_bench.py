"""What each Hyperscan database of the compiled library costs on a file: the rules' (scanned over
every byte) and the context patterns' (facts and framework detectors: the head and tail of a
file, all of a file up to 64 MiB) and the sampled ones' (a file's first 256 KiB and last 1 MiB),
CPU ms per MiB, in 256 KiB chunks as the scan reads them.

    python -P bench/matcher_bench.py FILE [--runs 5]

Run it from another commit's tree (`git archive REF | tar -x -C /tmp/ref`, `cd /tmp/ref`) to compare:
it imports the `app` of the directory it is run from.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
os.environ.setdefault("LOGTRIAGE_DATA_DIR", tempfile.mkdtemp(prefix="matcher-bench-"))

from app.service.worker import init_worker, worker_state

CHUNK = 256 << 10


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    init_worker({})
    compiled = worker_state().compiled
    with open(a.file, "rb") as fh:
        body = memoryview(fh.read())
    mib = len(body) / (1 << 20)

    def cost(matcher: object) -> str:
        times = []
        for _ in range(a.runs):
            t = time.process_time()
            for off in range(0, len(body), CHUNK):
                matcher.scan(body[off : off + CHUNK], [])  # type: ignore[attr-defined]
            times.append(time.process_time() - t)
        times.sort()
        # this shared host has slow spells (the same database runs 6.7 or 12 ms/MiB in turn):
        # the least time is the database's own cost, the median what a run met
        return f"min {times[0] * 1000 / mib:6.2f}  median {times[len(times) // 2] * 1000 / mib:6.2f}"

    roles = [e.role for e in compiled.entries]
    rules = sum(r in ("any", "all", "not", "probe", "metric") for r in roles)
    lib = compiled.library
    sampled = sum(len(getattr(f, "sampled", ())) for f in lib.facts) + sum(
        len(getattr(fw, "detect_sampled", ())) for fw in lib.frameworks
    )
    context = len(roles) - rules - sampled
    parts = f"{rules} rules', {context} context, {sampled} sampled"
    print(f"{a.file}: {mib:.1f} MiB, {len(roles)} patterns ({parts})")
    print(f"rules' database    {cost(compiled.matcher)} ms/MiB")
    if compiled.context_matcher is not None:
        print(f"context database   {cost(compiled.context_matcher)} ms/MiB")
    # the sampled database runs on a file's first 256 KiB and last 1 MiB only: its cost a MiB
    # there (older trees have none)
    if getattr(compiled, "sample_matcher", None) is not None:
        print(f"sampled database   {cost(compiled.sample_matcher)} ms/MiB")


if __name__ == "__main__":
    main()
