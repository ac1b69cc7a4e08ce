"""Reproduces a Ray job stuck because an actor asks for GPUs the cluster lacks.

The learner actor requests num_gpus=8 on a 2-CPU, 0-GPU local cluster. Ray
cannot place it; the autoscaler reports "No available node types can fulfill
resource request {'GPU': 8.0, ...}" and the driver waits. Here the wait is
bounded by a 60 s timeout on ray.get (GetTimeoutError); a real job would hang
until killed. If RAY_STATUS_OUT is set, `ray status` taken during the hang is
written there.
"""
import os
import subprocess
import threading

import ray

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote(num_gpus=8)
class Learner:
    def ready(self):
        return True


def snapshot_status():
    out = subprocess.run(["ray", "status", "--address", ray.get_runtime_context().gcs_address],
                         capture_output=True, text=True, timeout=60)
    with open(os.environ["RAY_STATUS_OUT"], "w") as f:
        f.write(out.stdout + out.stderr)


if os.environ.get("RAY_STATUS_OUT"):
    threading.Timer(30, snapshot_status).start()

try:
    print("creating learner group: 1 x Learner(num_gpus=8)", flush=True)
    learner = Learner.remote()
    ray.get(learner.ready.remote(), timeout=60)
    print("learner ready", flush=True)
finally:
    ray.shutdown()
