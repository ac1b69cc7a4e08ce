"""A healthy Ray job for the baseline: several actors, a few PPO-like iterations.

Two rollout actors and one learner actor on a local 2-CPU cluster print from
inside their processes, so the driver output carries Ray's real
"(RolloutWorker pid=...)" prefixes and log de-duplication notes. Exits 0.
"""
import random
import time

import ray

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote(num_cpus=0.5)
class RolloutWorker:
    def __init__(self, idx):
        self.idx = idx
        self.rng = random.Random(idx)

    def generate(self, it, n):
        time.sleep(0.2)
        rewards = [self.rng.random() for _ in range(n)]
        print(f"rollout worker {self.idx}: iteration {it}, {n} episodes, mean reward {sum(rewards) / n:.3f}", flush=True)
        return rewards


@ray.remote(num_cpus=1)
class Learner:
    def __init__(self):
        self.version = 0

    def update(self, rewards):
        self.version += 1
        loss = 1.0 / (1 + self.version) + 0.01 * random.random()
        print(f"learner: policy v{self.version} loss={loss:.4f} on {len(rewards)} samples", flush=True)
        return {"version": self.version, "loss": loss}


try:
    workers = [RolloutWorker.remote(i) for i in range(2)]
    learner = Learner.remote()
    for it in range(1, 9):
        batches = ray.get([w.generate.remote(it, 16) for w in workers])
        stats = ray.get(learner.update.remote([r for b in batches for r in b]))
        print(f"iteration {it}: policy_version={stats['version']} loss={stats['loss']:.4f}", flush=True)
        time.sleep(0.3)
    print("training complete", flush=True)
finally:
    ray.shutdown()
