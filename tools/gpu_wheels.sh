#!/bin/sh
# The Python 3.12 wheels that a lent GPU machine lacks for tools/gpu_images.sh, fetched here into .whl/ (ignored by
# git: add `/.whl/` to .git/info/exclude) to be carried with the call. That machine's python3 holds torch,
# torchvision, numpy, scipy, numba, pillow, pyarrow, fsspec, httpx, matplotlib, psutil, tqdm and dask's and
# distributed's small dependencies (click, cloudpickle, toolz, msgpack, sortedcontainers, pyyaml, jinja2); what it
# lacks is the store (zarr and its codecs), the engine (dask, distributed and theirs) and the binary baselines
# (pytorch-metric-learning). The versions are those of the project's .venv, so both machines run the same code.
#
#   sh tools/gpu_wheels.sh            (needs the package index; about 7 MB)
set -eu
PIP=${PIP:-.venv/bin/python -m pip}
OUT=${WHEELS:-.whl}
PACKAGES="zarr numcodecs donfig google-crc32c dask distributed partd locket tblib tornado zict pytorch-metric-learning"
mkdir -p "$OUT"
for name in $PACKAGES; do
    version=$($PIP show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
    [ -n "$version" ] || { echo "gpu_wheels: $name is not installed in this environment (make setup)" >&2; exit 1; }
    platforms=""
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
        manylinux2014_x86_64 manylinux1_x86_64; do
        platforms="$platforms --platform $p"
    done
    # shellcheck disable=SC2086  # PIP and the platforms are lists on purpose
    $PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
        -d "$OUT" "$name==$version"
done
ls -l "$OUT"
