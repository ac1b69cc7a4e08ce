#!/usr/bin/env bash
# Reproduces a real C++ ABI mismatch when importing a compiled extension.
#
# fused_rmsnorm_ext.cpp is a tiny Python extension that calls into libc10
# (c10::detail::torchCheckFail, which takes a std::string). It is compiled with
# -D_GLIBCXX_USE_CXX11_ABI=0 while the installed torch was built with the
# C++11 ABI, exactly like a wheel built against another torch/compiler. The
# mangled name then ends in "RKSs" instead of "RKNSt7__cxx11...", libc10 has no
# such symbol, and `import` fails with "undefined symbol".
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD_DIR:-$(mktemp -d /tmp/build.XXXXXX)}
PYINC=$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SUFFIX=$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
TORCHLIB=$(python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
mkdir -p "$BUILD/fused_kernels"
touch "$BUILD/fused_kernels/__init__.py"
g++ -O1 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I"$PYINC" \
    "$HERE/fused_rmsnorm_ext.cpp" -L"$TORCHLIB" -lc10 -Wl,-rpath,"$TORCHLIB" \
    -o "$BUILD/fused_kernels/fused_rmsnorm_ext$SUFFIX"
cd "$BUILD"
set +e
cat > train.py <<'PY'
import torch
print(f"torch {torch.__version__}, building model with fused RMSNorm", flush=True)
from fused_kernels import fused_rmsnorm_ext
print(fused_rmsnorm_ext.rmsnorm_check(1))
PY
python train.py
rc=$?
[ -z "${BUILD_DIR:-}" ] && rm -rf "$BUILD"
exit $rc
