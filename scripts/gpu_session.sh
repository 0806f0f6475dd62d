#!/usr/bin/env bash
# One stage of the GPU study on a lent, offline machine, in one command of at most 10 minutes.
#   scripts/gpu_session.sh freeze|check|study|extra|report [--minutes M] [--rehearse]
# A lent machine starts bare and is given back soon after each command, so every stage installs wif again from
# the carried wheelhouse and reads and writes the store carried beside it, all in .gpu/ (ignored; carry it):
#   .gpu/wheels/     scripts/wheelhouse.sh .gpu/wheels --have freeze.txt --python-version 3.12 \
#                        --platform manylinux_2_28_x86_64   (freeze.txt: what the freeze stage brought back)
#   .gpu/mlflow.db   the store so far (gunzip what the last stage brought back); absent: a new one
# What comes back goes to $OUT (default gpu-out/): log.txt, mlflow.db.gz, and the stage's own files.
#   freeze   the node's `pip freeze` (freeze.txt) and its GPU, driver and torch (node.txt): nothing installed
#   check    pytest -m gpu (pytest.txt), then wif-bandwidth: pinned and pageable copy rates, logged as a run
#   study    the 11 loader options x 3 fractions, raced, auto epochs, within --minutes (default 8)
#   extra    the bound (data=fixed), transfer=stream beside pin_nb, and data=encoded with workers, sharing --minutes
#   report   wif-report on the store (report.tar.gz)
# A stage that is cut short keeps what finished: the next study or extra resumes from the store it carries.
# --rehearse runs the stage here, on the CPU, at the smoke preset, with the checkout's own wif (no wheelhouse).
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "gpu_session.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage
STAGE=$1; shift
case $STAGE in freeze|check|study|extra|report) ;; -h|--help) usage ;; *) die "unknown stage $STAGE (--help lists them)" ;; esac
MINUTES=8
REHEARSE=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) [ $# -ge 2 ] || die "--minutes needs a value"; MINUTES=$2; shift ;;
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
echo "gpu_session.sh $STAGE, $(date -u +%FT%TZ), budget ${MINUTES} min$([ "$REHEARSE" = 0 ] || echo ', rehearsal on the CPU')"

save_store() {  # the store comes back compressed (a returned file may hold 16 MiB)
  [ ! -f .gpu/mlflow.db ] || gzip -c .gpu/mlflow.db > "$OUT/mlflow.db.gz"
}
trap save_store EXIT

if [ "$STAGE" = freeze ]; then
  "$PY" -m pip freeze > "$OUT/freeze.txt"
  { { command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } ||
      echo "no nvidia-smi"
    "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())'
  } > "$OUT/node.txt" 2>&1
  cat "$OUT/node.txt"
  echo "freeze.txt: $(wc -l < "$OUT/freeze.txt") packages"
  exit 0
fi

if [ "$REHEARSE" = 0 ]; then
  [ -d .gpu/wheels ] || die ".gpu/wheels is missing: build it with scripts/wheelhouse.sh and carry .gpu"
  "$PY" -m pip install -q --no-index --find-links .gpu/wheels wif
fi
PY_BIN=$(dirname "$(command -v "$PY")")
WIF() { if [ -x "$PY_BIN/$1" ]; then "$PY_BIN/$@"; else "$@"; fi; }

case $STAGE in
  check)
    set +e
    "$PY" -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt"
    echo "pytest -m gpu: exit ${PIPESTATUS[0]}"
    WIF wif-bandwidth --sizes-mb 1,16,256 --repeats 20
    echo "wif-bandwidth: exit $?"
    ;;
  study)
    "$PY" train.py -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7 hydra/sweeper=race trainer.epochs=auto \
      "sweep.budget_min=$MINUTES" ${SMOKE[@]+"${SMOKE[@]}"}
    ;;
  extra)
    share=$(awk "BEGIN {printf \"%.2f\", $MINUTES / 3}")
    "$PY" train.py -m data=fixed loader=baseline data.fraction=0.1,0.4,0.7 trainer.epochs=auto \
      "sweep.budget_min=$share" ${SMOKE[@]+"${SMOKE[@]}"} || true
    "$PY" train.py -m loader=pin_nb transfer=non_blocking,stream data.fraction=0.1,0.4,0.7 hydra/sweeper=race \
      trainer.epochs=auto "sweep.budget_min=$share" ${SMOKE[@]+"${SMOKE[@]}"} || true
    "$PY" train.py -m data=encoded data.augment=standard loader=pin_nb,pin_nb_w4_pf2,pin_nb_w8_pf2 \
      data.fraction=0.4 hydra/sweeper=race trainer.epochs=auto "sweep.budget_min=$share" ${SMOKE[@]+"${SMOKE[@]}"}
    ;;
  report)
    WIF wif-report --out .gpu/report --no-log
    tar -C .gpu -czf "$OUT/report.tar.gz" report
    ;;
esac
