"""fail-slow: no crash. From step --fault-step (run with 40) on, rank
--fault-rank (default 1) gets progressively slower in its rollout phase
(sleep of --slow-per-step seconds x (step - fault_step)), e.g. a throttling
GPU. Rank 0 waits for it in the gradient all_reduce, so its train_time grows
while rank 1's rollout_time grows. Run ~160 steps; the job finishes OK.
"""
import time

from trainlib import Trainer, main


class SlowingTrainer(Trainer):
    def rollout(self, step):
        batch = super().rollout(step)
        if self.rank == self.args.fault_rank and step > self.args.fault_step:
            time.sleep(self.args.slow_per_step * (step - self.args.fault_step))
        return batch


def add_args(p):
    p.add_argument("--slow-per-step", type=float, default=0.005)


if __name__ == "__main__":
    main(SlowingTrainer, __doc__, add_args)
