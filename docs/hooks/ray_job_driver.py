"""Ray job driver: submit a training entrypoint with Ray Jobs, wait for it, and on failure post
its logs to logtriage (run this where `ray job submit` would run: a CI runner, a laptop).

    export LOGTRIAGE_URL=http://logtriage.internal:8000 LOGTRIAGE_TOKEN=lt_...
    python ray_job_driver.py --address http://ray-head:8265 [--max-attempts 3] \
        -- python -m verl.trainer.main_ppo ...

With --max-attempts above 1 it acts on logtriage's decision: a `retry` or `retry_excluding` is
submitted again (the hosts to leave out are passed to the job as LOGTRIAGE_EXCLUDE_HOSTS in its
runtime_env and printed: drain them from the Ray cluster), and each rerun's ending is reported
(`logtriage submit --outcome`); any other decision ends the driver. The driver's exit status is
the job's: 0 when an attempt SUCCEEDED, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RETRY = {10: "retry", 11: "retry_excluding"}  # `logtriage submit --action-exit`


def _shell_vars(text: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in shlex.split(text) if "=" in w)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265"))
    p.add_argument("--working-dir", default=".")
    p.add_argument(
        "--max-attempts", type=int, default=1, help="attempts in all; above 1 acts on the decision"
    )
    p.add_argument("--poll", type=float, default=10.0, help="seconds between status checks")
    p.add_argument("entrypoint", nargs=argparse.REMAINDER)
    args = p.parse_args()
    entrypoint = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint

    from ray.job_submission import JobStatus, JobSubmissionClient  # pip install "ray[default]"

    client = JobSubmissionClient(args.address)
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    excluded: list[str] = []
    previous: tuple[str, str, str] | None = None  # (job id, analysis id, what the rerun did)
    for attempt in range(1, args.max_attempts + 1):
        env = {"LOGTRIAGE_EXCLUDE_HOSTS": ",".join(excluded)} if excluded else {}
        job_id = client.submit_job(
            entrypoint=" ".join(entrypoint),
            runtime_env={"working_dir": args.working_dir, **({"env_vars": env} if env else {})},
        )
        print(f"submitted Ray job {job_id} (attempt {attempt})", flush=True)
        while (status := client.get_job_status(job_id)) not in terminal:
            time.sleep(args.poll)
        if previous is not None:
            # how the rerun after the last failure ended: the history behind the next decisions
            first_job, analysis_id, did = previous
            subprocess.run(
                [
                    "logtriage",
                    "submit",
                    "--outcome",
                    "succeeded" if status == JobStatus.SUCCEEDED else "failed",
                    "--job-id",
                    first_job,
                    "--analysis-id",
                    analysis_id,
                    "--did",
                    did,
                    "--attempt-id",
                    job_id,
                    "--excluded-hosts",
                    ",".join(excluded),
                ],
                check=False,
                timeout=300,
            )
        if status == JobStatus.SUCCEEDED:
            return 0

        # the driver log holds the workers' output too (Ray prefixes it with "(Actor pid=..., ip=...)")
        log = Path(tempfile.mkdtemp()) / f"{job_id}.log"
        log.write_text(client.get_job_logs(job_id), encoding="utf-8")
        info = client.get_job_info(job_id)
        # `logtriage submit` never fails and reads LOGTRIAGE_URL / LOGTRIAGE_TOKEN from the environment;
        # every attempt is filed under the first attempt's id, so the outcomes follow its failures
        job_key = previous[0] if previous else job_id
        res = subprocess.run(
            [
                "logtriage",
                "submit",
                str(log),
                "--job-id",
                job_key,
                "--exit-code",
                "1",
                "--label",
                f"ray_status={status.value}",
                "--label",
                f"ray_message={(info.message or '')[:200]}",
                "--label",
                f"ray_job={job_id}",
                *(["--action-exit", "--shell"] if args.max_attempts > 1 else []),
            ],
            check=False,
            timeout=600,
            stdout=subprocess.PIPE if args.max_attempts > 1 else None,
            text=True,
        )
        if args.max_attempts <= 1:
            return 1
        found = _shell_vars(res.stdout or "")
        did = RETRY.get(res.returncode)
        if did is None or not found.get("LOGTRIAGE_ANALYSIS_ID"):
            print(
                f"logtriage: not submitting it again (decision {found.get('LOGTRIAGE_DECISION') or 'none'})"
            )
            return 1
        new = [h for h in found.get("LOGTRIAGE_EXCLUDE_HOSTS", "").split(",") if h and h not in excluded]
        excluded += new
        if new:
            print(
                f"logtriage: leave out {', '.join(new)} "
                "(drain them: ray's node labels or a restart without GPUs)"
            )
        previous = (job_key, found["LOGTRIAGE_ANALYSIS_ID"], did)
    print(f"logtriage: {args.max_attempts} attempts, none passed")
    return 1


if __name__ == "__main__":
    sys.exit(main())
