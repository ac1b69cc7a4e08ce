"""Reproduces an ordinary user bug inside a Ray task (a negative case).

The reward function looks up a key the sample does not have, so the task
raises KeyError and the driver gets ray.exceptions.RayTaskError(KeyError).
Nothing is wrong with Ray or the cluster.
"""
import ray

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote
def compute_rewards(batch):
    rewards = []
    for sample in batch:
        rewards.append(1.0 if sample["answer"] == sample["ground_truth"] else 0.0)
    return rewards


try:
    batches = [
        [{"answer": "391", "ground_truth": "391"}, {"answer": "12", "ground_truth": "14"}],
        [{"answer": "7", "gt": "7"}],
    ]
    rewards = ray.get([compute_rewards.remote(b) for b in batches])
    print("rewards:", rewards)
finally:
    ray.shutdown()
