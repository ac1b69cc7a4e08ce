"""device-assert: the prompt batch of step --fault-step on rank --fault-rank
(pass --fault-rank 0) contains token ids >= the model's vocab size (the
tokenizer has 4 added special tokens the embedding table does not have), so
the embedding lookup in the rollout triggers a CUDA device-side assert
(indexSelect "srcIndex < srcSelectDimSize"). Without CUDA_LAUNCH_BLOCKING the
error surfaces later, at the next synchronising call; with
CUDA_LAUNCH_BLOCKING=1 at the embedding itself. The other rank is left in a
collective and is torn down by torchrun (or its watchdog). NCCL/GPU only.
"""
import torch

from trainlib import Trainer, main


class BadTokenTrainer(Trainer):
    def sample_prompts(self):
        prompts = super().sample_prompts()
        if self.rank == self.args.fault_rank and self.step == self.args.fault_step:
            prompts[3, -1] = self.args.vocab_size + 3  # "<|im_end|>" from the chat template
        return prompts


if __name__ == "__main__":
    main(BadTokenTrainer, __doc__)
