"""oom-colocated: a second process on rank --fault-rank's GPU holds most of its
memory, as a colocated rollout / inference engine does between its turns; at
step --fault-step that rank's train phase asks for a buffer that would fit an
empty GPU but not next to it, so torch.OutOfMemoryError lists the other
process ("Process N has X GiB memory in use") with little reserved-but-unallocated
memory: not fragmentation, not the trainer's own growth. NCCL/GPU only.
"""
import subprocess
import sys

import torch

from trainlib import Trainer, main

HOLDER = r"""
import sys, time, torch
dev = torch.device("cuda", int(sys.argv[1]))
gib = float(sys.argv[2])
buf = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=dev)
print(f"rollout engine (pid {__import__('os').getpid()}): holding {gib:.1f} GiB on {dev} for its KV cache", flush=True)
sys.stdin.read()  # until the trainer goes away
"""


class ColocatedOOMTrainer(Trainer):
    holder = None

    def compute_loss(self, step, batch):
        if self.rank == self.args.fault_rank and step == self.args.fault_step - 1:
            free, total = torch.cuda.mem_get_info(self.device)
            hold = 0.55 * total / 2**30
            self.holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(self.device.index), f"{hold:.1f}"], stdin=subprocess.PIPE
            )
            while torch.cuda.mem_get_info(self.device)[0] > free - hold * 2**30 * 0.9:
                torch.cuda.synchronize(self.device)  # until the holder's allocation shows
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            total = torch.cuda.mem_get_info(self.device)[1]
            want = int(0.6 * total)
            self.log.info("train: allocating the packed batch's activations (%.1f GiB)", want / 2**30)
            acts = torch.empty(want, dtype=torch.uint8, device=self.device)
            del acts
        return super().compute_loss(step, batch)


if __name__ == "__main__":
    main(ColocatedOOMTrainer, __doc__)
