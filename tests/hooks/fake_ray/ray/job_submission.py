"""A stand-in for `ray.job_submission` (the part docs/hooks/ray_job_driver.py uses): submit_job
runs the entrypoint in a shell at once, with the runtime_env's env_vars, and keeps its output;
jobs live in the JSON file $FAKE_RAY_STATE so a test can read what was submitted."""

from __future__ import annotations

import enum
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass
class JobInfo:
    status: JobStatus
    message: str


class JobSubmissionClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.path = Path(os.environ["FAKE_RAY_STATE"])

    def _jobs(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def submit_job(self, *, entrypoint: str, runtime_env: dict[str, Any] | None = None) -> str:
        jobs = self._jobs()
        job_id = f"raysubmit_{len(jobs) + 1:04d}"
        env = {**os.environ, **((runtime_env or {}).get("env_vars") or {})}
        run = subprocess.run(["bash", "-c", entrypoint], capture_output=True, text=True, env=env, timeout=120)
        jobs[job_id] = {
            "entrypoint": entrypoint,
            "runtime_env": runtime_env,
            "status": "SUCCEEDED" if run.returncode == 0 else "FAILED",
            "logs": run.stdout + run.stderr,
            "message": ""
            if run.returncode == 0
            else f"Job entrypoint command failed with exit code {run.returncode}",
        }
        self.path.write_text(json.dumps(jobs))
        return job_id

    def get_job_status(self, job_id: str) -> JobStatus:
        return JobStatus(self._jobs()[job_id]["status"])

    def get_job_logs(self, job_id: str) -> str:
        return str(self._jobs()[job_id]["logs"])

    def get_job_info(self, job_id: str) -> JobInfo:
        job = self._jobs()[job_id]
        return JobInfo(JobStatus(job["status"]), job["message"])
