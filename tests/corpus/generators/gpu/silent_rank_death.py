"""silent-rank-death: rank --fault-rank (default 1) disappears in the middle of
the train phase of step --fault-step without printing anything: os._exit(0)
(exit code 0!) by default, or SIGKILL to itself with --how kill. Rank 0 is
left in DDP's gradient all_reduce: NCCL's watchdog times out (or NCCL reports
the peer gone), gloo reports the connection closed. torchrun's summary names
rank 0 (the only rank that "failed"); the culprit is rank 1.
"""
import os
import signal

from trainlib import Trainer, main


class DyingTrainer(Trainer):
    def compute_loss(self, step, batch):
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            if self.args.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)
        return super().compute_loss(step, batch)


def add_args(p):
    p.add_argument("--how", choices=["exit0", "kill"], default="exit0")


if __name__ == "__main__":
    main(DyingTrainer, __doc__, add_args)
