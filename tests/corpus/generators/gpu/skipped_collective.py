"""skipped-collective: a code desync. At step --fault-step (default 12) rank
--fault-rank (default 1) skips the per-step metrics all_reduce (an early-return
path that only that rank takes), so from then on its collectives are paired
with the wrong ones on rank 0: rank 1 runs ahead into the next step's DDP
gradient all_reduce while rank 0 waits in the metrics all_reduce. With NCCL
both watchdogs fire with different SeqNum/NumelIn; with gloo the mismatched
ring transfer errors out or times out.
"""
import torch

from trainlib import Trainer, main


class SkippingTrainer(Trainer):
    def reduce_metrics(self, step, metrics):
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            # "no finished rollouts on this rank -> nothing to sync" (the bug)
            return {k: float(v) for k, v in metrics.items()}
        return super().reduce_metrics(step, metrics)


if __name__ == "__main__":
    main(SkippingTrainer, __doc__)
