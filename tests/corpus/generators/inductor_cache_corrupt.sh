#!/usr/bin/env bash
# Reproduces a corrupted TorchInductor on-disk cache (JSONDecodeError).
#
# Run 1 compiles compile_model.py with mode="max-autotune" and fills the
# autotuning cache ($TORCHINDUCTOR_CACHE_DIR/cache/<hash>, a JSON file). The
# file is then cut in half, as when a job is killed mid-write or two jobs share
# one cache directory on NFS. Run 2 (a new batch size, so it autotunes again)
# reads the broken file and torch.compile fails. Only run 2's output is kept.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_cache}
rm -rf "$TORCHINDUCTOR_CACHE_DIR"
python "$HERE/compile_model.py" 64 > /dev/null 2>&1 || { echo "warm-up run failed" >&2; exit 2; }
f=$(ls "$TORCHINDUCTOR_CACHE_DIR"/cache/* | head -n 1)
head -c $(( $(wc -c < "$f") / 2 )) "$f" > "$f.tmp" && mv "$f.tmp" "$f"
python "$HERE/compile_model.py" 32
rc=$?
rm -rf "$TORCHINDUCTOR_CACHE_DIR"
exit $rc
