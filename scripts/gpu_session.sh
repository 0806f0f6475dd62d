#!/usr/bin/env bash
# Stages of the GPU study on a lent, offline machine, in one command of at most 10 minutes.
#   scripts/gpu_session.sh STAGE[,STAGE...] [--minutes M] [--tests PATHS] [--rehearse]
#     STAGE: freeze|check|overhead|study|extra|advise|report
# A lent machine starts bare and is given back soon after each command, so every command installs wif again from
# the carried wheelhouse and reads and writes the store carried beside it, all in .gpu/ (ignored; carry it):
#   .gpu/wheels/     scripts/wheelhouse.sh .gpu/wheels --have HAVE --python-version 3.12 \
#                        --platform manylinux_2_28_x86_64   (HAVE: freeze.txt as brought back, or a list of the
#                        node's packages known beforehand, names alone where versions are not known)
#   .gpu/mlflow.db   the store so far (gunzip what the last command brought back); absent: a new one
# What comes back goes to $OUT (default gpu-out/): log.txt, mlflow.db.gz, the node's `pip freeze` (freeze.txt)
# and its GPU, driver and torch (node.txt), whatever the stage, and the stages' own files.
#   freeze   freeze.txt and node.txt alone: nothing installed (for a node whose packages are not known)
#   check    pytest -m gpu (pytest.txt) on --tests (default tests; e.g. tests/test_limit.py,tests/test_decode_gpu.py for
#            what changed since the last GPU run), then wif-bandwidth: pinned and pageable copy rates, logged as a run
#   overhead benchmarks/overhead.py on GoogLeNet: wif's epoch against a hand-written loop's (overhead.txt)
#   study    the 11 loader options x 3 fractions, raced, auto epochs
#   extra    the bound (data=fixed), transfer=stream beside pin_nb, and data=encoded with workers
#   advise   wif-advise on the study's workload at fraction 0.1 (the study's first within its minutes), then `wif-advise --` on examples/train_slow_reads,
#            each to its answer; then scripts/gpu_checks.py: each advice's limit, busy share and interference
#            against the study's baseline-gpu_resident gap (run study first, or have its runs in the store)
#   report   wif-report on the store (report.tar.gz)
# Stages given together run in that order in one command (a machine's start is paid once). The budgeted sweeps
# (study; extra's three; advise's two advices) end within --minutes (default 8) of the first one's start,
# sharing what is left as each starts: on an H200 check took 4 minutes and report seconds (2026-11-26), so
# `check,study,report` fits a 10-minute command with --minutes 5. A failed step is said, the steps after it
# still run, and the command exits 1.
# A stage cut short keeps what finished: the next study or extra resumes from the store.
# --rehearse runs the stages here, on the CPU, at the smoke preset, with the checkout's own wif (no wheelhouse).
set -euo pipefail

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "gpu_session.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in -h|--help) usage ;; esac
IFS=, read -r -a STAGES <<< "$1"; shift
[ ${#STAGES[@]} -gt 0 ] || die "no stage given (--help lists them)"
BUDGETED=0
for stage in "${STAGES[@]}"; do
  case $stage in freeze|check|overhead|report) ;; study|extra|advise) BUDGETED=$((BUDGETED + 1)) ;;
    *) die "unknown stage ${stage:-''} (--help lists them)" ;; esac
done
MINUTES=8
TESTS=tests
REHEARSE=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) [ $# -ge 2 ] || die "--minutes needs a value"; MINUTES=$2; shift ;;
    --tests) [ $# -ge 2 ] || die "--tests needs a value"; TESTS=$2; shift ;;
    --rehearse) REHEARSE=1 ;;
    -h|--help) usage ;;
    *) die "unknown argument $1 (--help lists them)" ;;
  esac
  shift
done
[[ $MINUTES =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN {exit !($MINUTES > 0 && $MINUTES <= 9)}" ||
  die "--minutes $MINUTES: a number of minutes above 0 and at most 9 (a command may run 10)"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT" .gpu
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI="sqlite:///$ROOT/.gpu/mlflow.db" WIF_CACHE_DIR="$ROOT/.gpu/cache"
PY=${PYTHON:-python3}
SMOKE=()
[ "$REHEARSE" = 0 ] || SMOKE=(preset=smoke)
# The budgeted sweeps share --minutes by weight (study 3; extra's bound, stream and decode sweeps 1 each; advise's
# study advice 2 and script advice 1): each
# gets its weight's part of what is left when it starts, so what one leaves unspent goes to those after it. The
# minutes count from the first budgeted sweep's start: a slow check must not leave the study none.
DEADLINE=""
WEIGHT_LEFT=$((BUDGETED * 3))
take() {  # take WEIGHT: BUDGET, the next sweep's sweep.budget_min (not in a subshell: WEIGHT_LEFT is kept)
  [ -n "$DEADLINE" ] || DEADLINE=$(( $(date +%s) + $(awk "BEGIN {printf \"%d\", $MINUTES * 60}") ))
  local left=$(( DEADLINE - $(date +%s) ))
  BUDGET=$(awk "BEGIN {m = $left / 60 * $1 / $WEIGHT_LEFT; printf \"%.2f\", (m > 0.05 ? m : 0.05)}")
  WEIGHT_LEFT=$((WEIGHT_LEFT - $1))
}
echo "gpu_session.sh ${STAGES[*]}, $(date -u +%FT%TZ), budget ${MINUTES} min$([ "$REHEARSE" = 0 ] || echo ', rehearsal on the CPU')"

save_store() {  # the store comes back compressed (a returned file may hold 16 MiB)
  [ ! -f .gpu/mlflow.db ] || gzip -c .gpu/mlflow.db > "$OUT/mlflow.db.gz"
}
trap save_store EXIT

# The node as found, before anything is installed: what a wheelhouse for it is built from, whatever the stage.
"$PY" -m pip freeze > "$OUT/freeze.txt"
{ { command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } ||
    echo "no nvidia-smi"
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())'
} > "$OUT/node.txt" 2>&1
cat "$OUT/node.txt"
echo "freeze.txt: $(wc -l < "$OUT/freeze.txt") packages"
[ "${STAGES[*]}" != freeze ] || exit 0

if [ "$REHEARSE" = 0 ]; then
  [ -d .gpu/wheels ] || die ".gpu/wheels is missing: build it with scripts/wheelhouse.sh and carry .gpu"
  # A node whose own packages clash with the closure's pins still gets the wheels, each as it is (said so)
  "$PY" -m pip install -q --no-index --find-links .gpu/wheels wif ||
    { echo "pip could not resolve wif's closure beside the node's packages: installing the wheels as they are"
      "$PY" -m pip install -q --no-index --no-deps .gpu/wheels/*.whl; }
fi
# Everything below runs the checkout's wif (train.py, pytest's pythonpath, `python -m` from here): the wheel only
# brought wif's requirements, so a wheelhouse built before this checkout's last change still serves.
SWEEP=(trainer.epochs=auto ${SMOKE[@]+"${SMOKE[@]}"})
FAILED=()
step() {  # one command of a stage: a failure is said and counted, and the stages after it still run
  local name=$1; shift
  "$@" || { local rc=$?; echo "$name: exit $rc"; FAILED+=("$name"); }
}

for STAGE in "${STAGES[@]}"; do
  echo "== $STAGE, $(date -u +%T)"
  case $STAGE in
    check)
      # A test that hangs on the device must not take the study's minutes: each has 120 s where pytest-timeout is
      PER_TEST=()
      ! "$PY" -c 'import pytest_timeout' 2> /dev/null || PER_TEST=(--timeout 120)
      IFS=, read -r -a TEST_PATHS <<< "$TESTS"
      step "pytest -m gpu" bash -o pipefail -c '"$0" -m pytest -m gpu -q -p no:cacheprovider "${@:2}" 2>&1 | tee "$1"' \
        "$PY" "$OUT/pytest.txt" ${PER_TEST[@]+"${PER_TEST[@]}"} "${TEST_PATHS[@]}"
      step wif-bandwidth "$PY" -m wif.tools.bandwidth --sizes-mb 1,16,256 --repeats 20
      ;;
    overhead)  # six rounds of 3 epochs of 5,000 images a side: about 2 minutes on an H200
      OVERHEAD=(--device cuda --model googlenet --rounds 6 --epochs 3 --num-train 5000)
      [ "$REHEARSE" = 0 ] || OVERHEAD=(--device cpu --rounds 2 --epochs 2 --num-train 500)
      step overhead bash -o pipefail -c '"$0" benchmarks/overhead.py "${@:2}" 2>&1 | tee "$1"' "$PY" \
        "$OUT/overhead.txt" "${OVERHEAD[@]}"
      ;;
    study)
      take 3
      step study "$PY" train.py -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7 hydra/sweeper=race \
        "sweep.budget_min=$BUDGET" "${SWEEP[@]}"
      ;;
    extra)
      take 1
      step "extra (bound)" "$PY" train.py -m data=fixed loader=baseline data.fraction=0.1,0.4,0.7 \
        "sweep.budget_min=$BUDGET" "${SWEEP[@]}"
      take 1
      step "extra (stream)" "$PY" train.py -m loader=pin_nb transfer=non_blocking,stream data.fraction=0.1,0.4,0.7 \
        hydra/sweeper=race "sweep.budget_min=$BUDGET" "${SWEEP[@]}"
      take 1
      step "extra (decode)" "$PY" train.py -m data=encoded data.augment=standard \
        loader=pin_nb,pin_nb_w4_pf2,pin_nb_w8_pf2 data.fraction=0.4 hydra/sweeper=race \
        "sweep.budget_min=$BUDGET" "${SWEEP[@]}"
      ;;
    advise)  # the GPU step issue's check: the study's GoogLeNet at 64 px named launch-bound, its interference
      take 2   # against the measured gap to gpu_resident (scripts/gpu_checks.py); then a script's advice
      # at the fraction the budgeted study reaches first, so gpu_checks has the gap to set the advice beside
      step "advise (study)" "$PY" -m wif.advisor.advise_cli data.fraction=0.1 ${SMOKE[@]+"${SMOKE[@]}"} \
        --minutes "$BUDGET"
      take 1
      step "advise (script)" "$PY" -m wif.advisor.advise_cli --minutes "$BUDGET" -- \
        "$PY" -m wif.examples.train_slow_reads --epochs 40 --n-train 768 --batch-size 32
      # a script's folder, not the checkout, heads sys.path: the checkout's wif is put first, as for `python -m`
      step "gpu checks" env PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" scripts/gpu_checks.py
      ;;
    report)
      step report "$PY" -m wif.report --out .gpu/report --no-log
      [ ! -d .gpu/report ] || tar -C .gpu -czf "$OUT/report.tar.gz" report
      ;;
  esac
done
[ ${#FAILED[@]} -eq 0 ] || { echo "failed: ${FAILED[*]}"; exit 1; }
