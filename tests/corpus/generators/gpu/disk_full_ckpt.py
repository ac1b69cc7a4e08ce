"""disk-full-ckpt: periodic checkpoints (rank 0 torch.save of model + AdamW
state, ~4.7 MB each) go to --ckpt-dir on a filesystem that is too small (an
8 MiB tmpfs mounted in a private mount namespace by run_gpu.sh). The first
checkpoint fits, the second fails in torch.save (ENOSPC, possibly reported
only as "PytorchStreamWriter failed writing file"). Rank 1 waits in
gather_object/barrier and is torn down by torchrun. Expected phase: checkpoint.
"""
from trainlib import Trainer, main

if __name__ == "__main__":
    main(Trainer, __doc__)
