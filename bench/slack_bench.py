"""The Slack bot's latency on loopback: a signed event in, the threaded reply out.

Starts `logtriage serve` (one worker, SQLite in a temporary directory) with the bot pointed at
the local fake of Slack's Web API from the tests (tests/slackfake.py), then sends signed
events one at a time and times, per event: the HTTP acknowledgement Slack waits for (it must
come within 3 s), and the time until the fake records the `chat.postMessage` of the reply.

    python bench/slack_bench.py [--rounds 30] [--example docs/slack/example-reply.json]

Cases: a 41 KB log shared as a file (files.info, the download with the bot token, the
analysis, the reply, the reactions) and a mention with the same failure pasted in a code block.
`--example` writes the Block Kit message of the first file-share reply (the docs show it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.servicekit import ECC, free_port, training_log, wait_ready  # noqa: E402
from tests.slackfake import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    fake_slack,
    file_share,
    mention,
    post_event,
)


def serve(data: Path, fake: FakeSlack, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env.update(
        LOGTRIAGE_DATA_DIR=str(data),
        LOGTRIAGE_SLACK_BOT_TOKEN=BOT_TOKEN,
        LOGTRIAGE_SLACK_SIGNING_SECRET=SIGNING_SECRET,
        LOGTRIAGE_SLACK_API_URL=fake.api_url,
        LOGTRIAGE_PUBLIC_URL="https://logtriage.example.com",
        LOGTRIAGE_LOG_LEVEL="warning",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=REPO,
    )
    if wait_ready(f"http://127.0.0.1:{port}", proc=proc):
        return proc
    proc.kill()
    raise SystemExit("server did not become ready")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def run(rounds: int, example: Path | None) -> None:
    log = (REPO / "examples" / "ecc-cascade" / "rank2.log").read_bytes()
    pasted = training_log(ECC.format(ip="10.0.0.9"), steps=5)
    with fake_slack() as fake, tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = serve(Path(tmp), fake, port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
                results: dict[str, tuple[list[float], list[float]]] = {}
                for case in ("file share (41 KB log)", "mention, pasted log"):
                    acks: list[float] = []
                    replies: list[float] = []
                    for i in range(rounds + 2):  # the first two warm up (auth.test, first scan)
                        channel = f"C0BENCH{i:04d}{'F' if case.startswith('file') else 'M'}"
                        ts = f"{1700000000 + i}.000100"
                        if case.startswith("file"):
                            info = fake.add_file(f"F0B{i:07d}", "rank2.log", log)
                            payload = file_share(channel, ts, [{"id": info["id"], "name": "rank2.log"}])
                        else:
                            text = f"<@UBOTLOGTR> why?\n```{pasted}```"
                            payload = mention(channel, ts, text, user="U0B")
                        t0 = time.monotonic()
                        r = post_event(c, payload)
                        t_ack = time.monotonic() - t0
                        assert r.status_code == 200, r.text

                        def replied(f: FakeSlack, ch: str = channel) -> bool:
                            return any(x.params.get("channel") == ch for x in f.of("chat.postMessage"))

                        fake.wait_for(replied)
                        call = next(
                            x for x in fake.of("chat.postMessage") if x.params.get("channel") == channel
                        )
                        if i >= 2:
                            acks.append(t_ack * 1000)
                            replies.append((call.at - t0) * 1000)
                        if example is not None and case.startswith("file") and i == 2:
                            msg = {k: call.params[k] for k in ("channel", "thread_ts", "text", "blocks")}
                            if isinstance(msg["blocks"], str):
                                msg["blocks"] = json.loads(msg["blocks"])
                            example.write_text(json.dumps(msg, indent=2, ensure_ascii=False) + "\n")
                    results[case] = (acks, replies)
        finally:
            proc.terminate()
            proc.wait(60)
    print(f"{rounds} events each, one at a time, `logtriage serve` on SQLite, fake Slack on loopback")
    print(f"{'case':28} {'ack p50':>8} {'ack p99':>8} {'reply p50':>10} {'reply p99':>10}  (ms)")
    for case, (acks, replies) in results.items():
        print(
            f"{case:28} {statistics.median(acks):8.1f} {pct(acks, 0.99):8.1f} "
            f"{statistics.median(replies):10.1f} {pct(replies, 0.99):10.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--example", type=Path, help="write the first reply's Block Kit JSON here")
    args = ap.parse_args()
    run(args.rounds, args.example)


if __name__ == "__main__":
    main()
