#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, run the gpu-marked tests, the GPU-relevant
# test modules, `gpufeed doctor` and the benchmark suites with --device cuda, and bundle
# the logs and results into one folder ($OUT, default ./gpu-check-out).
#
#   bash bench/gpu_check.sh [smoke] [tests|marked] [feed] [images] [augment] [tabular] [cudfprofile] [storage]
#                           [formats] [tune] [stall]   (default: all of them but marked)
#
# marked: the gpu-marked tests alone (tests also reruns the CPU suites with device="auto").
# cudfprofile: each recipe op on cuDF timed and profiled under three RMM allocators (bench/cudf_profile.py).
# feed: the DALI loader with its feed in worker processes and in its own thread, on the GPU
#   and in DALI's CPU-only mode (bench/feed_ab.py).
# IMAGES_ARGS, AUGMENT_ARGS, STALL_ARGS: extra arguments for those suites (a short lease:
# IMAGES_ARGS="--rounds 1 --only dali-gpu torch-gpu"); PART_TIMEOUT: seconds each part may
# run (default: no limit), so that one hung part leaves time for the others.
#
# It runs the source tree (PYTHONPATH), so it works on a machine that cannot install, with a
# Python that has torch ($PYTHON; `make gpu-check` passes the venv's). Without a CUDA GPU it
# stops at once with exit 2. Each run starts $OUT afresh (its own logs and results only:
# other files there are left alone) and packs them into $OUT/bundle.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
PY=${PYTHON:-python3}
known="smoke tests marked feed images augment tabular cudfprofile storage formats tune stall"
parts=${*:-${known/ marked/}}
for part in $parts; do
  case " $known " in
    *" $part "*) ;;
    *) echo "gpu_check: unknown part '$part' (choose from: $known)" >&2; exit 2 ;;
  esac
done
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*"; }

# Up front: a CUDA GPU as torch sees it. Without one every part failed on its own, minutes
# later (tracebacks in smoke, the CPU test suites run, a 1,024-image set generated first).
command -v "$PY" >/dev/null 2>&1 || { echo "gpu_check: no Python at '$PY' (set PYTHON, or run make gpu-check)" >&2; exit 2; }
gpu=$("$PY" - 2>&1 <<'PY'
import sys
try:
    import torch
except Exception as exc:  # noqa: BLE001 - any reason torch does not load is the answer
    print(f"{sys.executable} cannot import torch ({type(exc).__name__}: {exc}): run `make gpu-check`, "
          "or set PYTHON to a venv's python that has gpufeed's dependencies")
    sys.exit(3)
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA GPU")
    sys.exit(1)
print(f"{torch.cuda.get_device_name(0)} (torch {torch.__version__}, {torch.cuda.device_count()} GPU(s))")
PY
)
gpu_rc=$?
gpu=${gpu##*$'\n'}  # the last line: the answer, after any warning an import printed
if [ "$gpu_rc" -eq 3 ]; then
  echo "gpu_check: $gpu" >&2
  exit 2
elif [ "$gpu_rc" -ne 0 ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(nvidia-smi -L 2>&1); smi="nvidia-smi -L: ${smi%%$'\n'*}"
  else
    smi="no nvidia-smi either"
  fi
  echo "gpu_check: this check needs a CUDA GPU, and there is none to use here: $gpu; $smi" >&2
  exit 2
fi
log "GPU: $gpu"

# A fresh record each run: the logs had been appended to, so a rerun mixed old FAILED lines
# with new results, and the bundle packed the previous bundle and the converted smoke data.
# Only what this script writes is removed (smoke-data: where earlier versions converted).
rm -rf "$OUT/results" "$OUT/smoke-data" "$OUT/bundle.tar.gz" "$OUT/doctor.log" "$OUT/smoke.log" \
  "$OUT/pytest-gpu.log" "$OUT/pytest-gpu-auto.log" "$OUT/feed-ab.log" "$OUT/cudf-profile.log"
mkdir -p "$OUT/results"
SMOKE=""  # the converted smoke data: a temporary folder, never in $OUT or the bundle
trap '[ -z "$SMOKE" ] || rm -rf "$SMOKE"' EXIT
status=0
{
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  fi
  $PY -m gpufeed doctor
} 2>&1 | tee "$OUT/doctor.log"
run_part() {
  local part=$1
  case $part in
    smoke)
      # Each DALI GPU graph alone, one process each, before the test run: a decoder that
      # crashes the process (nvImageCodec's ROI decode has segfaulted on some GPUs) is named
      # here instead of ending pytest with a bare signal. Folder train/val (file feed, mixed
      # decode with and without crop), WebDataset and TFRecord (DALI's own readers) and the
      # raw cache, converted once from the same images (no DALI in that process).
      SMOKE=$(mktemp -d "${TMPDIR:-/tmp}/gpufeed-smoke.XXXXXX")
      $PY - "$SMOKE" <<'PY' 2>&1 | tee -a "$OUT/smoke.log"
import sys
from pathlib import Path
from gpufeed.datasets.images import default_image_dataset
from gpufeed.datasets.shards.convert import convert
root, src = Path(sys.argv[1]), default_image_dataset(256)
root.mkdir(parents=True, exist_ok=True)
(root / "folder").unlink(missing_ok=True)
(root / "folder").symlink_to(Path(src).resolve())
for fmt in ("webdataset", "tfrecord", "raw"):
    convert(src, root / fmt, format=fmt, shard_size="4MB", progress=False)
PY
      [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "smoke: preparing the smoke data FAILED (above): the graphs whose data is there run, the others are named as not run" | tee -a "$OUT/smoke.log"; status=1; }
      for graph in folder:train folder:val webdataset:train tfrecord:train raw:train raw:val; do
        [ -e "$SMOKE/${graph%%:*}" ] || { echo "smoke: $graph not run (no converted data)" | tee -a "$OUT/smoke.log"; continue; }
        $PY - "$SMOKE" "$graph" <<'PY' 2>&1 | tee -a "$OUT/smoke.log"
import sys
from pathlib import Path
from gpufeed.pipelines import classification_loader
source, mode = sys.argv[2].split(":")
loader = classification_loader(str(Path(sys.argv[1]) / source), train=mode == "train", batch_size=32,
                               backend="dali", device="cuda")
n = sum(len(y) for _, y in loader)
print(f"smoke: DALI GPU {source} {mode} gave {n} images on {loader.device}, {len(loader.skipped)} skipped")
if source in ("webdataset", "tfrecord"):
    # The loader reads shards through the kit's feed; dali_iterator() runs DALI's own reader
    # graph (mixed image_random_crop, checkpointing), another GPU graph: one epoch, then a
    # checkpoint taken after batch 1 must give batch 2 again (same samples and crops).
    import torch
    it = loader.dali_iterator()
    m = sum(b[0]["label"].shape[0] for b in it)
    it = loader.dali_iterator()
    next(it)
    state = it.state_dict()
    want = next(it)[0]
    got = loader.dali_iterator(checkpoint=state).__next__()[0]
    # Other crops differ by far more than a decoder's rounding (normalised units).
    same = torch.equal(got["label"], want["label"]) and (got["data"] - want["data"]).abs().mean() < 0.02
    print(f"smoke: DALI GPU {source} dali_iterator() gave {m} images on {want['data'].device}; "
          f"resumed from a checkpoint: {'same batch' if same else 'ANOTHER BATCH'}")
    sys.exit(0 if same and want["data"].is_cuda else 1)
PY
        rc=${PIPESTATUS[0]}
        [ "$rc" -eq 0 ] || { echo "smoke: DALI GPU $graph graph FAILED (exit $rc; 139/-11 is a crash in the decoder)" | tee -a "$OUT/smoke.log"; status=1; }
      done ;;
    marked)
      $PY -m pytest -q -p no:cacheprovider -rs -m gpu tests 2>&1 | tee "$OUT/pytest-gpu.log" || status=1 ;;
    feed)
      $PY bench/feed_ab.py --device cuda 2>&1 | tee "$OUT/feed-ab.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      # DALI's CPU-only mode keeps the feed in its thread; on 16 cores its main thread may be
      # the limit (0.76x the baseline on the H200's cores): the same comparison there.
      $PY bench/feed_ab.py --device cpu 2>&1 | tee -a "$OUT/feed-ab.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    tests)
      $PY -m pytest -q -p no:cacheprovider -rs -m gpu tests 2>&1 | tee "$OUT/pytest-gpu.log" || status=1
      # The CPU suites again, now that device="auto" resolves to the GPU.
      $PY -m pytest -q -p no:cacheprovider -rs \
        tests/pipelines tests/gpu_transforms tests/datasets \
        2>&1 | tee "$OUT/pytest-gpu-auto.log" || status=1 ;;
    images)
      $PY -m gpufeed bench images --mode train --device cuda ${IMAGES_ARGS:-} --out "$OUT/results" || status=1
      $PY -m gpufeed bench images --mode val --device cuda ${IMAGES_ARGS:-} --out "$OUT/results" || status=1 ;;
    augment)
      $PY -m gpufeed bench augment --device cuda ${AUGMENT_ARGS:-} --out "$OUT/results" || status=1 ;;
    tabular)
      # rules and the recipe op by op on both tables (hand-written pandas is always the baseline)
      $PY -m gpufeed bench tabular --backends "${TABULAR_BACKENDS:-pandas-baseline,polars,cudf}" \
        --tables sensor,transactions --rows "${TABULAR_ROWS:-1000000,10000000}" --out "$OUT/results" || status=1 ;;
    cudfprofile)
      $PY bench/cudf_profile.py 2>&1 | tee "$OUT/cudf-profile.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    storage)
      $PY -m gpufeed bench storage --device cuda --out "$OUT/results" || status=1 ;;
    formats)
      $PY -m gpufeed bench formats --backend cudf --out "$OUT/results" || status=1 ;;
    tune)
      $PY -m gpufeed tune --device cuda --out "$OUT/results" || status=1 ;;
    stall)
      $PY -m gpufeed stall --model resnet50 --loader auto --device cuda ${STALL_ARGS:-} --out "$OUT/results" || status=1 ;;
  esac
  return $status
}
for part in $parts; do
  log "$part"
  if [ -n "${PART_TIMEOUT:-}" ]; then
    # The part in a child shell under timeout (exported functions cross into it).
    export -f run_part log; export OUT PY status
    timeout --kill-after=10 "$PART_TIMEOUT" bash -c "run_part $part"
    rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || echo "gpu_check: $part stopped after PART_TIMEOUT=${PART_TIMEOUT}s"
    [ "$rc" -eq 0 ] || status=1
  else
    run_part "$part" || status=1
  fi
done
# The logs and results of this run (the bundle of the last one was removed above).
tar -C "$OUT" --exclude=./bundle.tar.gz -czf "$OUT.tar.gz" . && mv "$OUT.tar.gz" "$OUT/bundle.tar.gz"
log "done, status $status"
exit $status
