"""straggler-once: the straggler of straggler_timeout.py, but only on the job's first attempt
(--once-file does not exist yet; the stalled rank creates it): a fault of the moment that a
plain retry gets past. Used by retry_e2e.sh (issue 24: a transient fault retried to success).
"""
import os
import time

from trainlib import Trainer, main


class StragglerOnceTrainer(Trainer):
    def compute_loss(self, step, batch):
        marker = self.args.once_file
        if self.rank == self.args.fault_rank and step == self.args.fault_step and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(3.0 * self.args.pg_timeout)  # a stuck reward call, a slow filesystem, once
        return super().compute_loss(step, batch)


def extra_args(p):
    p.add_argument("--once-file", required=True, help="the stall happens only while this file is absent")


if __name__ == "__main__":
    main(StragglerOnceTrainer, __doc__, extra_args)
