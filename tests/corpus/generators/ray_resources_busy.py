"""Reproduces a Ray job stuck because actors already hold every CPU.

A replay-buffer actor takes both CPUs of the local cluster; the training task
then needs 2 CPUs and waits forever. The raylet writes its "cannot be scheduled
right now ... all cluster resources being claimed by actors" warning to
raylet.out (copied to $RAYLET_OUT if set); the driver only sees its own
60 s ray.get timeout.
"""
import os
import shutil

import ray

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote(num_cpus=2)
class ReplayBuffer:
    def ready(self):
        return True


@ray.remote(num_cpus=2)
def train_step():
    return 0.0


try:
    buf = ReplayBuffer.remote()
    ray.get(buf.ready.remote())
    print("replay buffer ready; launching train_step", flush=True)
    print("loss:", ray.get(train_step.remote(), timeout=60))
finally:
    session = ray._private.worker._global_node.get_session_dir_path()
    ray.shutdown()
    if os.environ.get("RAYLET_OUT"):
        shutil.copy(os.path.join(session, "logs", "raylet.out"), os.environ["RAYLET_OUT"])
