"""mismatched-size: both ranks call the same all_reduce at the same step, but
with tensors of different sizes. After each rollout the trainer all_reduces a
histogram of response lengths built with torch.bincount (no minlength), so its
size is max_len + 1 and depends on the rank's own data. At step --fault-step
one response on rank --fault-rank runs to 4096 tokens (stop token missed), so
that rank all_reduces 4097 elements while the other reduces gen_len + 1.
Run once plainly (NCCL: hang / watchdog timeout, or silent garbage) and once
with TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's collective fingerprint check
reports the mismatch). Uses --no-ddp (hand-written gradient all_reduce).
"""
import torch
import torch.distributed as dist

from trainlib import Trainer, main


class LengthHistTrainer(Trainer):
    def rollout(self, step):
        batch = super().rollout(step)
        lengths = torch.full((self.args.batch_size,), self.args.gen_len, dtype=torch.long)
        lengths[: self.args.batch_size // 2] -= torch.randint(0, 4, (self.args.batch_size // 2,), generator=self.gen)
        if step == self.args.fault_step and self.rank == self.args.fault_rank:
            lengths[-1] = 4096  # runaway generation: hit max_new_tokens
        hist = torch.bincount(lengths).float().to(self.device)
        dist.all_reduce(hist)
        mean_len = (hist * torch.arange(hist.numel(), device=self.device)).sum() / hist.sum()
        self.log.info("rollout: response_length mean %.2f max %d", mean_len.item(), hist.numel() - 1)
        return batch


if __name__ == "__main__":
    main(LengthHistTrainer, __doc__)
