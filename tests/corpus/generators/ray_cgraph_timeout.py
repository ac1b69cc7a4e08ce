"""Reproduces RayChannelTimeoutError from a Ray Compiled Graph (accelerated DAG).

Two "TP shard" actors are wired into a compiled graph with
dag.experimental_compile(). One shard stalls on the 3rd call (as a vLLM TP
worker does when it recompiles / deadlocks), and the driver's read times out
after RAY_CGRAPH_get_timeout seconds (set to 5 by the caller).
"""
import time

import ray
from ray.dag import InputNode, MultiOutputNode

ray.init(num_cpus=2, include_dashboard=False)


@ray.remote
class ShardWorker:
    def __init__(self, rank):
        self.rank = rank
        self.calls = 0

    def execute_model(self, step):
        self.calls += 1
        if self.rank == 1 and self.calls == 3:
            time.sleep(30)
        return {"rank": self.rank, "step": step, "tokens": 16}


workers = [ShardWorker.remote(r) for r in range(2)]
with InputNode() as inp:
    dag = MultiOutputNode([w.execute_model.bind(inp) for w in workers])
compiled = dag.experimental_compile()
try:
    for step in range(5):
        outs = ray.get(compiled.execute(step))
        print(f"step {step}: {outs}", flush=True)
finally:
    compiled.teardown()
    ray.shutdown()
