"""straggler-timeout: rank --fault-rank (default 1) stalls in the middle of the
train phase of step --fault-step (default 10) -- it sleeps --stall-factor (3)
process-group timeouts after the rollout, before its forward/backward -- so
rank 0 waits in DDP's gradient all_reduce until the collective times out
(NCCL watchdog, or gloo's recv timeout). Expected laggard: rank 1, phase train.
"""
import time

from trainlib import Trainer, main


class StragglerTrainer(Trainer):
    def compute_loss(self, step, batch):
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            # e.g. a stuck reward-model call / slow filesystem
            time.sleep(self.args.stall_factor * self.args.pg_timeout)
        return super().compute_loss(step, batch)


def extra_args(p):
    p.add_argument("--stall-factor", type=float, default=3.0,
                   help="the stall, in process-group timeouts (10: still stuck when the launcher ends the job)")


if __name__ == "__main__":
    main(StragglerTrainer, __doc__, extra_args)
