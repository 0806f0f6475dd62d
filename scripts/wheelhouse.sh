#!/usr/bin/env bash
# Build a wheelhouse: wif and every package it needs, as wheels in one folder, for GPU nodes without an index.
#   scripts/wheelhouse.sh WHEELHOUSE [--with-torch] [--extras pipelines,timm] [--have NODE_FREEZE [--with-ui]]
#                         [--python-version 3.12 --platform manylinux_2_28_x86_64]
# Without --with-torch the torch stack (torch, torchvision, triton, the nvidia-* CUDA wheels) is left out, for nodes
# that have their own torch and torchvision (a module, a container); torch's own pure-Python dependencies
# (sympy, networkx, jinja2, ...) are kept. --have FILE (the node's `pip freeze`) writes only what the node lacks:
# the closure is resolved around the node's versions (they are pip constraints), and every package the node has
# at the chosen version is left out; one the node has at a version wif's closure excludes is written (said so).
# With --have, wif is the node build: MLflow's client and SQL store (mlflow-skinny) without its UI and server,
# unless the node has mlflow or --with-ui is given. --python-version/--platform (repeatable) resolve and download
# wheels for the node's interpreter instead of this one (PYTHON, default python3). Install on the node, from a
# copy of this checkout:
#   pip install --no-index --find-links WHEELHOUSE wif
# PIP_* variables (PIP_INDEX_URL, ...) reach pip as usual.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "wheelhouse.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in -h|--help) usage ;; -*) die "the wheelhouse folder comes first, not $1" ;; esac
OUT=$1; shift
WITH_TORCH=0
WITH_UI=0
EXTRAS=""
HAVE=""
PYVER=""
PLATFORMS=()
while [ $# -gt 0 ]; do
  case $1 in
    --with-torch) WITH_TORCH=1 ;;
    --with-ui) WITH_UI=1 ;;
    --extras) [ $# -ge 2 ] || die "--extras needs a value"; EXTRAS=$2; shift ;;
    --have) [ $# -ge 2 ] || die "--have needs a file"; HAVE=$2; shift ;;
    --python-version) [ $# -ge 2 ] || die "--python-version needs a value"; PYVER=$2; shift ;;
    --platform) [ $# -ge 2 ] || die "--platform needs a value"; PLATFORMS+=("$2"); shift ;;
    -h|--help) usage ;;
    *) die "unknown argument $1 (--help lists them)" ;;
  esac
  shift
done
[ -z "$HAVE" ] || [ -f "$HAVE" ] || die "--have $HAVE: no such file"
[ -z "$PYVER" ] || [[ $PYVER =~ ^3\.[0-9]+$ ]] || die "--python-version $PYVER: expected MAJOR.MINOR, e.g. 3.12"
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELPER="$ROOT/scripts/wheelhouse_have.py"
[ -z "$HAVE" ] || HAVE=$(cd "$(dirname "$HAVE")" && pwd)/$(basename "$HAVE")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/src" "$WORK/wif" "$WORK/local" "$WORK/stubs" "$WORK/out"
touch "$WORK/constraints.txt"
# pip prepares and builds a local project in its own folder (egg-info, build/): it works on a copy, and the
# checkout is left as it was.
tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ --exclude='*.whl' -cf - . | tar -C "$WORK/src" -xf -
[ -z "$HAVE" ] || [ "$WITH_UI" = 1 ] || "$PY" "$HELPER" node-build "$WORK/src/pyproject.toml" "$HAVE"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/wif" "$WORK/src"
WIF_WHEEL=$(ls "$WORK"/wif/wif-*.whl)
TARGET="$WIF_WHEEL${EXTRAS:+[$EXTRAS]}"

# Another interpreter's wheels: pip takes them only as wheels (--only-binary=:all:). A dependency published only
# as source (antlr4-python3-runtime, prefetch_generator: found by resolving for this interpreter first) is built
# here into $WORK/local, where it must come out pure Python, for any Python.
CROSS=()
if [ -n "$PYVER" ] || [ ${#PLATFORMS[@]} -gt 0 ]; then
  # --target: pip (before 24) takes these options only for an install into a folder; a dry run writes nothing.
  CROSS=(--only-binary=:all: --target "$WORK/target")
  [ -z "$PYVER" ] || CROSS+=(--python-version "$PYVER")
  if [ ${#PLATFORMS[@]} -gt 0 ]; then
    for p in $("$PY" "$HELPER" platforms "${PLATFORMS[@]}"); do CROSS+=(--platform "$p"); done
  fi
  "$PY" -m pip install --quiet --dry-run --ignore-installed --report "$WORK/native.json" "$TARGET" 2> "$WORK/pip.err" ||
    { cat "$WORK/pip.err" >&2; die "pip could not resolve wif's closure for this interpreter (its error above)"; }
  "$PY" "$HELPER" sdists "$WORK/native.json" > "$WORK/sdists.txt"
  [ ! -s "$WORK/sdists.txt" ] || "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/local" -r "$WORK/sdists.txt"
  if ls "$WORK/local" | grep -v -- '-none-any\.whl$'; then
    die "these have no wheel for the node and build here for this Python only: run with PYTHON= the node's Python"
  fi
fi
LINKS=(--find-links "$WORK/local")
NODE_PY=${PYVER:-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
if [ -n "$HAVE" ]; then
  # The node's versions as constraints (with metadata-only stand-ins, for versions no index has).
  "$PY" "$HELPER" constraints "$HAVE" "$WIF_WHEEL" "$EXTRAS" "$NODE_PY" "$WORK/stubs" ${PLATFORMS[@]+"${PLATFORMS[@]}"} \
    > "$WORK/constraints.txt"
  LINKS+=(--find-links "$WORK/stubs")
fi

# 1. What pip would install in an empty environment (around the node's packages with --have): the whole closure,
# pinned (nothing is installed). Where the node's version of a package clashes with the closure (mlflow's
# pandas<3 against a node's pandas 3), that one constraint goes, one at a time, and its wheel is written.
for _ in $(seq 1 30); do
  if "$PY" -m pip install --dry-run --ignore-installed --report "$WORK/report.json" -c "$WORK/constraints.txt" \
      "${LINKS[@]}" ${CROSS[@]+"${CROSS[@]}"} "$TARGET" > "$WORK/pip.log" 2>&1; then
    rm -f "$WORK/pip.log"; break
  fi
  clash=$(sed -n 's/^ *The user requested (constraint) \([^=]*\)==\(.*\)$/\1 \2/p' "$WORK/pip.log" | head -1)
  [ -n "$clash" ] || break
  set -- $clash
  why=$(grep -i -m1 "depends on $1[^a-z0-9_.-]" "$WORK/pip.log" | sed 's/^ *//' || true)
  echo "wheelhouse.sh: the node's $1 $2 clashes with wif's closure${why:+ ($why, ...)}: not a constraint" >&2
  grep -v "^$1==" "$WORK/constraints.txt" > "$WORK/c" || true
  mv "$WORK/c" "$WORK/constraints.txt"
  rm -f "$WORK/stubs/${1//-/_}"-*.whl
done
if [ -f "$WORK/pip.log" ]; then
  grep -v -e '^WARNING: Location' -e '^ *\(Collecting\|Downloading\|Using cached\|Processing\|Obtaining\|━\)' "$WORK/pip.log" >&2
  die "pip could not resolve wif's closure${HAVE:+ around $HAVE} (its error above)"
fi
# 2. name==version for each, the torch stack left out unless asked for, what the node has left out, wif apart.
"$PY" "$HELPER" select "$WORK/report.json" "$WITH_TORCH" ${HAVE:+"$HAVE"} > "$WORK/requirements.txt"
# 3. Wheels of them all (a package published only as source is built into a wheel here, once) and wif's. For
# another interpreter: its wheels downloaded, and the pure-Python ones built here from source.
if [ ! -s "$WORK/requirements.txt" ]; then
  :
elif [ ${#CROSS[@]} -gt 0 ]; then
  "$PY" -m pip download --quiet --no-deps --dest "$WORK/out" --find-links "$WORK/local" "${CROSS[@]:0:1}" "${CROSS[@]:3}" -r "$WORK/requirements.txt"
else
  "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/out" -r "$WORK/requirements.txt"
fi
cp "$WIF_WHEEL" "$WORK/out/"
written=("$WORK"/out/*.whl)
mb=$(du -cb "${written[@]}" | tail -1 | awk '{printf "%.1f", $1 / 1e6}')
mv -f "${written[@]}" "$OUT/"
note=""
[ "$WITH_TORCH" = 1 ] || note=", torch stack left out"
[ -z "$HAVE" ] || note="$note, only what $(basename "$HAVE") lacks"
[ ${#CROSS[@]} -eq 0 ] || note="$note, for Python $NODE_PY ${PLATFORMS[*]+${PLATFORMS[*]}}"
echo "wheelhouse: $OUT  ${#written[@]} wheels written, $mb MB$note"
