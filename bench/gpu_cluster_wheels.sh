#!/usr/bin/env bash
# What `kview ranks --cluster` needs on the GPU machine (Python 3.12 with numpy, pandas, pyarrow,
# click, cloudpickle, fsspec, jinja2, msgpack, psutil, pyyaml, sortedcontainers, toolz; no
# package index), carried as wheels in parts small enough to travel beside the repository:
#   here:  bash bench/gpu_cluster_wheels.sh pack [PART_MIB]   -> .whl/part.00 .. (ignored by git)
#   there: bash bench/gpu_cluster_wheels.sh take              (one call per part, carrying it)
#   there: bash bench/gpu_cluster_wheels.sh install           (after the last part; PYTHONPATH)
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=/tmp/kview-wheel-parts
case "${1:-}" in
pack)
    size=${2:-7}
    exclude=$(git rev-parse --git-path info/exclude)
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
    rm -rf .whl && mkdir -p .whl/wheels
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_12_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -d .whl/wheels \
        polars==2.1.0 polars-runtime-32==2.1.0 connectorx==0.4.6 platformdirs==4.14.8 \
        dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2 zict==3.0.0 tornado==6.6.1
    tar -cf - -C .whl wheels | split -b "${size}M" -d - .whl/part.
    rm -rf .whl/wheels
    ls -l .whl
    ;;
take)  # the part this call carried, kept outside the tree until the last one has come
    mkdir -p "$PARTS"
    cp .whl/part.* "$PARTS"/
    ls "$PARTS"
    ;;
install)
    rm -rf /tmp/kview-wheels /tmp/site && mkdir -p /tmp/kview-wheels
    cat "$PARTS"/part.* | tar -xf - -C /tmp/kview-wheels
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        /tmp/kview-wheels/wheels/*.whl
    PYTHONPATH=/tmp/site:src python3 -c "import polars, connectorx, distributed, kview.cluster; print('ok', polars.__version__, distributed.__version__)"
    ;;
*)
    echo "usage: $0 pack [PART_MIB] | take | install" >&2
    exit 2
    ;;
esac
