#!/usr/bin/env bash
# Stage what a lent GPU machine needs to run gpufeed's GPU checks: the shared tool's DALI and
# kornia wheels, plus what the kit imports that the machine's image lacks or has too old
# (polars: the table tests import it; narwhals >= 2.27; google-crc32c: TFRecord), in parts of
# 44 MiB: with the working tree (~16 MB) a 56 MiB part went past a call's 64 MiB.
#
#   bash bench/stage_gpu.sh [dali|cudf|all]   (default dali; from the project root; then, as ../shared/design/GPU.md says,
#                                       one `run` per part, back to back, the last one running
#                                       .stage/pNN/install.sh then e.g. bash bench/gpu_check.sh ...)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
what=${1:-dali}
bash ../shared/tools/device-wheels "$what"
# cuDF 26.10 (cudf-cu13) also needs, pinned here because the image's newer copies "satisfy" a
# bare name (seen on the H200 on 2026-11-27): nvjitlink >= 13.3 (the image has 13.0), numba < 0.65
# (the image has 0.68), so llvmlite 0.46, and numpy <= 2.4 for that numba (the image has 2.5).
# webdataset: its own reader reads the kit's shards in two gpu-marked tests (skipped there in the
# fourth run); the image has pyyaml and numpy.
extra=(polars==2.1.0 polars-runtime-32==2.1.0 narwhals==2.29.0 google-crc32c==1.9.0 webdataset==1.0.2 braceexpand==0.1.7)
# Dask-cuDF (read_dask, the partitioned recipe on the GPU): dask-cudf and what the image lacks of
# its closure (the dashboard's bokeh left out).
if [ "$what" != dali ]; then
  extra+=(nvidia-nvjitlink==13.5.37 numba==0.64.0 llvmlite==0.46.0 numpy==2.4.6
          dask-cudf-cu13==26.10.2 rapids-dask-dependency==26.10.0 dask==2026.7.1 distributed==2026.7.1
          partd==1.4.2 locket==1.0.0 tornado==6.6.1 zict==3.0.0 tblib==3.2.2)
fi
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 any; do plat+=(--platform "$p"); done
for pkg in "${extra[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plat[@]}" -d .stage/wheels "$pkg" 2>&1 | grep -v 'is ignored' || true
done
rm -rf .stage/p[0-9]* .stage/chunk*
tar -C .stage/wheels -cf - . | split -b 44m -d -a 2 - .stage/chunk
for c in .stage/chunk*; do d=.stage/p${c#.stage/chunk}; mkdir -p "$d"; mv "$c" "$d/part"; done
# The shared tool's install line replaced by every staged wheel file, --no-deps: by name, one the
# image already has in another version counts as "already satisfied" (the tool lists bare names),
# and pip's resolver refused the whole install for one dependency the image has in another version
# (cuDF's nvjitlink, then numba's llvmlite). A file is installed in its version, whatever the
# image holds; the `pip check` after it names what is off.
sed -i 's|^python3 -m pip install -q .*$|python3 -m pip install -q --no-deps --no-index "$HOME"/wheels/*.whl|' .stage/install.sh
last=$(ls -d .stage/p[0-9]* | tail -1)
cp .stage/install.sh "$last/install.sh"
echo "staged in $(ls -d .stage/p[0-9]* | wc -l) parts (.stage/p00 .. $last); install: $last/install.sh"
grep '^python3 -m pip install' "$last/install.sh"; echo "wheels: $(ls .stage/wheels | wc -l)"
