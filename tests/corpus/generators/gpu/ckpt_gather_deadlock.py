"""ckpt-gather-deadlock: at checkpoint time (every --ckpt-every steps) rank 0
saves the model and then calls dist.gather_object() to collect every rank's
data-loader state, but the gather sits inside `if rank == 0:` so rank 1 never
calls it: rank 1 finishes "saving", goes on to the next step and waits in the
DDP gradient all_reduce. Rank 0 blocks in gather_object -> hang -> process
group timeout. Expected phase: checkpoint.

With --variant barrier the code is the other common shape of this bug: the
gather is inside `if rank == 0:` and every rank then calls dist.barrier(), so
rank 1 waits in the barrier while rank 0 waits in gather_object.
"""
import os
import time

import torch
import torch.distributed as dist

from trainlib import Trainer, main


class BuggyCkptTrainer(Trainer):
    def save_checkpoint(self, step):
        self.phase = "checkpoint"
        path = self.checkpoint_path(step)
        self.log.info("saving checkpoint to %s", path)
        t0 = time.perf_counter()
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": step},
                       os.path.join(path, "model_optim.pt"))
            states = [None] * self.world_size
            dist.gather_object(self.data_state, states, dst=0)  # bug: only rank 0 reaches this
            torch.save(states, os.path.join(path, "dataloader_states.pt"))
        if self.args.variant == "barrier":
            dist.barrier()
        self.log.info("checkpoint saved: %s (%.2fs)", path, time.perf_counter() - t0)


def add_args(p):
    p.add_argument("--variant", choices=["next-step", "barrier"], default="next-step")


if __name__ == "__main__":
    main(BuggyCkptTrainer, __doc__, add_args)
