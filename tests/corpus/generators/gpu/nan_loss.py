"""nan-loss: the learning rate is far too large (run with e.g. --lr 30
--max-grad-norm 0: no clipping) so the critic/value loss and grad norm blow up
over a few steps and the loss becomes inf/nan. After the metrics all_reduce
every rank checks the loss and raises, as trainers do ("loss is not finite").
"""
import math

from trainlib import Trainer, main


class NaNGuardTrainer(Trainer):
    def check_finite(self, step, m):
        if not math.isfinite(m["loss"]):
            self.log.error("non-finite loss detected at step %d: loss=%s grad_norm=%s", step, m["loss"], m["grad_norm"])
            raise FloatingPointError(f"Loss is {m['loss']} at step {step}, aborting training (grad_norm={m['grad_norm']})")


if __name__ == "__main__":
    main(NaNGuardTrainer, __doc__)
