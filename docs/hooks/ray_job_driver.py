"""Ray job driver: submit a training entrypoint with Ray Jobs, wait for it, and on failure post
its logs to logtriage (run this where `ray job submit` would run: a CI runner, a laptop).

    export LOGTRIAGE_URL=http://logtriage.internal:8000 LOGTRIAGE_TOKEN=lt_...
    python ray_job_driver.py --address http://ray-head:8265 -- python -m verl.trainer.main_ppo ...

The driver's exit status is the job's: 0 when it SUCCEEDED, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265"))
    p.add_argument("--working-dir", default=".")
    p.add_argument("entrypoint", nargs=argparse.REMAINDER)
    args = p.parse_args()
    entrypoint = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint

    from ray.job_submission import JobStatus, JobSubmissionClient  # pip install "ray[default]"

    client = JobSubmissionClient(args.address)
    job_id = client.submit_job(entrypoint=" ".join(entrypoint), runtime_env={"working_dir": args.working_dir})
    print(f"submitted Ray job {job_id}", flush=True)
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    while (status := client.get_job_status(job_id)) not in terminal:
        time.sleep(10)
    if status == JobStatus.SUCCEEDED:
        return 0

    # the driver log holds the workers' output too (Ray prefixes it with "(Actor pid=..., ip=...)")
    log = Path(tempfile.mkdtemp()) / f"{job_id}.log"
    log.write_text(client.get_job_logs(job_id), encoding="utf-8")
    info = client.get_job_info(job_id)
    # `logtriage submit` never fails and reads LOGTRIAGE_URL / LOGTRIAGE_TOKEN from the environment
    subprocess.run(
        [
            "logtriage",
            "submit",
            str(log),
            "--job-id",
            job_id,
            "--exit-code",
            "1",
            "--label",
            f"ray_status={status.value}",
            "--label",
            f"ray_message={(info.message or '')[:200]}",
        ],
        check=False,
        timeout=600,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
