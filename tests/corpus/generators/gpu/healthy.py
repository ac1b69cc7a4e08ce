"""healthy-nccl-info: a negative. The same trainer, nothing broken: 50 steps,
eval every 10, checkpoint every 25. run_gpu.sh runs it with NCCL_DEBUG=INFO
and TORCH_DISTRIBUTED_DEBUG=INFO (run_cpu.sh: gloo, TORCH_DISTRIBUTED_DEBUG=INFO).
"""
from trainlib import Trainer, main

if __name__ == "__main__":
    main(Trainer, __doc__)
