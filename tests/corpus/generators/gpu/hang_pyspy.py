"""hang-pyspy: a hang at eval time. At the eval of step --fault-step rank 0
gathers sample generations for logging with dist.gather_object(), but the
gather sits inside `if rank == 0:`; rank 1 goes straight to the eval
all_reduce. Rank 0 waits in gather_object, rank 1 in all_reduce. Each rank
writes its pid and, just before blocking, a marker file into $HANG_MARKER_DIR
so that run_gpu.sh can take `py-spy dump` of both ranks after 10 s; then the
process-group timeout ends the job. Expected phase: eval.
"""
import os

import torch
import torch.distributed as dist

from trainlib import Trainer, main


class GatherEvalTrainer(Trainer):
    def setup(self):
        super().setup()
        d = os.environ.get("HANG_MARKER_DIR")
        if d:
            with open(os.path.join(d, "rank%d.pid" % self.rank), "w") as f:
                f.write(str(os.getpid()))

    def mark_blocking(self):
        d = os.environ.get("HANG_MARKER_DIR")
        if d:
            open(os.path.join(d, "blocking_rank%d" % self.rank), "w").close()

    @torch.no_grad()
    def evaluate(self, step):
        self.phase = "eval"
        self.log.info("eval: running held-out rollouts at step %d", step)
        g = torch.Generator(device="cpu").manual_seed(7 + self.rank)
        prompts = torch.randint(0, self.args.vocab_size, (self.args.batch_size, self.args.prompt_len), generator=g)
        tokens = self.generate(prompts)
        reward = self.reward_fn(tokens).mean().to(self.device)
        if step == self.args.fault_step:
            self.mark_blocking()
        if self.rank == 0:
            samples = [None] * self.world_size
            dist.gather_object(tokens[:2].tolist(), samples, dst=0)  # bug: only rank 0 calls it
            self.log.info("eval samples: %s", samples[0][0][:8])
        dist.all_reduce(reward)
        reward /= self.world_size
        self.log.info("eval step %d eval_reward %.4f", step, reward.item())


if __name__ == "__main__":
    main(GatherEvalTrainer, __doc__)
