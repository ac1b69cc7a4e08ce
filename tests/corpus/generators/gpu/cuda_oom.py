"""cuda-oom: at step --fault-step rank --fault-rank (default 1) gets a "long
context" batch in the train phase and allocates its logits buffer
(64 x 32768 x 51200 bf16, ~200 GiB), which fails at once with
torch.OutOfMemoryError. That rank exits with the traceback; torchrun then
tears down rank 0, which is waiting in the gradient all_reduce.
NCCL/GPU only.
"""
import torch

from trainlib import Trainer, main


class OOMTrainer(Trainer):
    def compute_loss(self, step, batch):
        if self.rank == self.args.fault_rank and step == self.args.fault_step:
            self.log.info("train: packed long-context batch: 64 x 32768 tokens")
            logits_buf = torch.empty((64, 32768, 51200), dtype=torch.bfloat16, device=self.device)
            del logits_buf
        return super().compute_loss(step, batch)


if __name__ == "__main__":
    main(OOMTrainer, __doc__)
