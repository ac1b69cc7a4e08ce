#!/usr/bin/env bash
# Reproduces "No space left on device" for real: a private mount namespace gets
# a 1 MiB tmpfs at /mnt/tiny (needs root; nothing is mounted outside the
# namespace, so there is nothing to unmount afterwards), and disk_full_ckpt.py
# saves its checkpoint there.   Usage: disk_full.sh torch|jsonl
HERE=$(cd "$(dirname "$0")" && pwd)
exec unshare --mount --propagation private bash -c '
    mkdir -p /mnt/tiny && mount -t tmpfs -o size=1m tmpfs /mnt/tiny &&
    python "$0/disk_full_ckpt.py" /mnt/tiny/checkpoints "$1"' "$HERE" "${1:-torch}"
