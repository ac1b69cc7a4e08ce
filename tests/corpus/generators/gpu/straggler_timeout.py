"""straggler-timeout: rank --fault-rank (default 1) stalls in the middle of the
train phase of step --fault-step (default 10) -- it sleeps 3x the
process-group timeout after the rollout, before its forward/backward -- so
rank 0 waits in DDP's gradient all_reduce until the collective times out
(NCCL watchdog, or gloo's recv timeout). Expected laggard: rank 1, phase train.
"""
import time

from trainlib import Trainer, main


class StragglerTrainer(Trainer):
    def compute_loss(self, step, batch):
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            time.sleep(3 * self.args.pg_timeout)  # e.g. a stuck reward-model call / slow filesystem
        return super().compute_loss(step, batch)


if __name__ == "__main__":
    main(StragglerTrainer, __doc__)
