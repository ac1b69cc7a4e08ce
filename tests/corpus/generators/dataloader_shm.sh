#!/usr/bin/env bash
# Reproduces /dev/shm exhaustion under DataLoader workers, as in a container
# started with Docker's default 64 MB /dev/shm: a private mount namespace gets
# a 16 MiB tmpfs on /dev/shm (needs root; the host's /dev/shm is untouched) and
# dataloader_worker_death.py shm passes 3 MB samples between processes.
HERE=$(cd "$(dirname "$0")" && pwd)
exec unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size=16m tmpfs /dev/shm &&
    python "$0/dataloader_worker_death.py" shm' "$HERE"
