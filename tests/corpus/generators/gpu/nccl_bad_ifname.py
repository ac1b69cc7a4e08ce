"""nccl-bad-ifname: an ordinary (healthy) trainer launched with
NCCL_SOCKET_IFNAME=doesnotexist0 NCCL_DEBUG=INFO (set by run_gpu.sh): NCCL
finds no socket interface for its bootstrap, so creating the communicator
(eager, because init_process_group gets device_id) fails on every rank with
NCCL WARN lines and a DistBackendError. Expected phase: launch. NCCL only.
"""
from trainlib import Trainer, main

if __name__ == "__main__":
    main(Trainer, __doc__)
