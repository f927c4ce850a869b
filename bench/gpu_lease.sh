#!/usr/bin/env bash
# The one working call of a GPU lease, after the staging calls (bench/stage_gpu.sh; one `run`
# per part, back to back): it reassembles and installs the staged wheels, then runs the GPU
# checks in order of priority, each under the time left of TOTAL seconds, and packs each
# check's folder into $OUT as it ends (a tarball each: at most 8 files come back).
#
#   run carry=[".stage/pNN"]  command: bash bench/gpu_lease.sh .stage/pNN 560 [CHECK ...]
#
# CHECK: a bench/gpu_check.sh part (marked, cudfprofile, tabular, feed, images, stall, ...)
# or "storage" (a short GPU storage run); default: marked cudfprofile tabular stall storage.
# Each gets at most its share below (seconds); what the time left cannot hold is named, not run.
last=${1:?usage: gpu_lease.sh .stage/pNN [TOTAL [CHECK ...]]}; last=${last%/}; TOTAL=${2:-560}
shift; [ $# -gt 0 ] && shift
checks=${*:-marked cudfprofile tabular stall storage}
END=$(( $(date +%s) + TOTAL )); RES=${OUT:-/tmp/gpu-lease-out}; mkdir -p "$RES"
WORK=${WORK:-/tmp}  # each check's folder, WORK/gN, packed into RES as gN-CHECK.tgz
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
declare -A want=([marked]=200 [cudfprofile]=150 [tabular]=180 [stall]=90 [storage]=140 [feed]=120 [images]=150)
left() { echo $(( END - $(date +%s) - 15 )); }
mkdir -p "$HOME/stage" && cp "$last/part" "$HOME/stage/${last##*/}"
bash "$last/install.sh" > "$RES/install.log" 2>&1; echo "install rc=$?"; tail -n 5 "$RES/install.log"
n=0
for check in $checks; do
  n=$((n + 1)); dir=$WORK/g$n; t=$(left); [ "$t" -gt "${want[$check]:-120}" ] && t=${want[$check]:-120}
  if [ "$t" -lt 30 ]; then echo "== $check: not run ($t s left)"; continue; fi
  echo "== $(date -u +%T) $check (up to $t s) -> g$n-$check.tgz"; rm -rf "$dir" "$dir.log"
  if [ "$check" = storage ]; then
    mkdir -p "$dir/results"
    timeout --kill-after=5 "$t" python3 -m gpufeed bench storage --device cuda --storage warm remote \
      --formats folder webdataset raw --backends dali-gpu torch-gpu --rounds 1 --repeats 2 \
      --out "$dir/results" > "$dir/storage.log" 2>&1
    rc=$?
  else
    TABULAR_ROWS=${TABULAR_ROWS:-1000000} OUT=$dir timeout --kill-after=5 "$t" bash bench/gpu_check.sh "$check" \
      > "$dir.log" 2>&1
    rc=$?; mkdir -p "$dir" && mv "$dir.log" "$dir/run.log"
  fi
  echo "== $check rc=$rc (124: stopped at its time)"; tail -n 12 "$dir"/*.log 2>/dev/null | grep -E 'passed|failed|FAILED|Error|results:' | head -n 20
  tar czf "$RES/g$n-$check.tgz" -C "$WORK" "g$n" 2>/dev/null
done
echo "== end $(date -u +%T), $(left) s spare"
