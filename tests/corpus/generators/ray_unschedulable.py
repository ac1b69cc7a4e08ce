"""Reproduces a Ray job stuck because an actor asks for GPUs the cluster lacks.

The learner actor requests num_gpus=8 on a 2-CPU, 0-GPU local cluster. Ray
cannot place it, prints its "cannot be scheduled right now" / infeasible
warning, and the driver waits; here the wait is bounded by a 60 s timeout on
ray.get (GetTimeoutError), where a real job would hang until killed.
"""
import ray

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote(num_gpus=8)
class Learner:
    def ready(self):
        return True


try:
    print("creating learner group: 1 x Learner(num_gpus=8)", flush=True)
    learner = Learner.remote()
    ray.get(learner.ready.remote(), timeout=60)
    print("learner ready", flush=True)
finally:
    ray.shutdown()
