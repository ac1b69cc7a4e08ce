#!/usr/bin/env bash
# Runs shm_sigbus.py under torchrun with /dev/shm shrunk to 8 MiB in a private
# mount namespace (needs root; the host's /dev/shm is untouched). A worker gets
# SIGBUS and torchelastic reports exitcode -7.
HERE=$(cd "$(dirname "$0")" && pwd)
exec unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size=8m tmpfs /dev/shm &&
    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port ${PORT:-29551} "$0/shm_sigbus.py"' "$HERE"
