"""Reproduces a Ray actor process dying unexpectedly (ActorDiedError).

A rollout-worker actor generates a few batches, then its process exits hard
with os._exit(1) (as when a native library aborts). The driver's next call on
the actor raises ray.exceptions.ActorDiedError. Local cluster, 2 CPUs:

    python ray_actor_died.py
"""
import os
import time

import ray

ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")


@ray.remote
class RolloutWorker:
    def __init__(self, idx):
        self.idx = idx
        self.calls = 0

    def generate(self, n):
        self.calls += 1
        if self.calls == 3:
            print(f"worker {self.idx}: loading next shard", flush=True)
            os._exit(1)
        print(f"worker {self.idx}: generated {n} samples (call {self.calls})", flush=True)
        return [f"sample-{i}" for i in range(n)]


try:
    workers = [RolloutWorker.remote(i) for i in range(2)]
    for it in range(1, 5):
        batches = ray.get([w.generate.remote(8) for w in workers])
        print(f"iteration {it}: got {sum(len(b) for b in batches)} samples", flush=True)
        time.sleep(0.5)
finally:
    ray.shutdown()
