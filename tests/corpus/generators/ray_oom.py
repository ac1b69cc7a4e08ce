"""Reproduces Ray's own OOM killer ending a task (ray.exceptions.OutOfMemoryError).

Safety first: the node's memory_usage_threshold is set just ~1.5 GiB above the
memory already in use when the script starts, and the task allocates at most
3 GiB in 128 MiB steps, so Ray's memory monitor kills the task long before the
machine is under any real pressure. max_retries=0 so the first kill is final.
"""
import os
import time

GiB = 1 << 30
mem = {}
with open("/proc/meminfo") as f:
    for line in f:
        k, v = line.split(":")
        mem[k] = int(v.split()[0]) * 1024
used = mem["MemTotal"] - mem["MemAvailable"]
threshold = min(0.95, (used + 1.5 * GiB) / mem["MemTotal"])
os.environ["RAY_memory_usage_threshold"] = f"{threshold:.3f}"
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "100")

import numpy as np  # noqa: E402
import ray  # noqa: E402

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote(max_retries=0)
def build_replay_buffer(n_chunks):
    chunks = []
    for i in range(n_chunks):  # at most 24 x 128 MiB = 3 GiB
        chunks.append(np.ones(128 * 1024 * 1024 // 8))
        time.sleep(0.2)
    return len(chunks)


try:
    print("building replay buffer", flush=True)
    print("chunks:", ray.get(build_replay_buffer.remote(24)))
finally:
    ray.shutdown()
