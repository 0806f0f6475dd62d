#!/usr/bin/env bash
# Build a wheelhouse: wif and every package it needs, as wheels in one folder, for GPU nodes without an index.
#   scripts/wheelhouse.sh WHEELHOUSE [--with-torch] [--extras pipelines,timm]
# Without --with-torch the torch stack (torch, torchvision, triton, the nvidia-* CUDA wheels) is left out, for nodes
# that have their own torch and torchvision (a module, a container); torch's own pure-Python dependencies
# (sympy, networkx, jinja2, ...) are kept. Install on the node, from a copy of this checkout:
#   pip install --no-index --find-links WHEELHOUSE wif
# Build it with the Python version the nodes run (wheels are per Python version and platform); PYTHON
# picks the interpreter (default: python3). PIP_* variables (PIP_INDEX_URL, ...) reach pip as usual.
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1; shift
WITH_TORCH=0
EXTRAS=""
while [ $# -gt 0 ]; do
  case $1 in
    --with-torch) WITH_TORCH=1 ;;
    --extras) EXTRAS=$2; shift ;;
    -h|--help) usage ;;
    *) echo "wheelhouse.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# pip prepares and builds a local project in its own folder (egg-info, build/): it works on a copy, and the
# checkout is left as it was.
mkdir "$WORK/src"
tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ --exclude='*.whl' -cf - . | tar -C "$WORK/src" -xf -
TARGET="$WORK/src${EXTRAS:+[$EXTRAS]}"

# 1. What pip would install in an empty environment: the whole closure, pinned (nothing is installed).
"$PY" -m pip install --quiet --dry-run --ignore-installed --report "$WORK/report.json" "$TARGET"
# 2. name==version for each, the torch stack left out unless asked for, wif itself built apart.
"$PY" - "$WORK/report.json" "$WITH_TORCH" > "$WORK/requirements.txt" <<'PYEOF'
import json, re, sys
report, with_torch = json.load(open(sys.argv[1])), sys.argv[2] == "1"
torch_stack = re.compile(r"^(torch|torchvision|triton|cuda-.*|nvidia-(?!ml-py$|dali).*)$")  # CUDA runtime wheels, not NVML or DALI
for item in report["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    canonical = re.sub(r"[-_.]+", "-", name).lower()
    if canonical == "wif" or (not with_torch and torch_stack.match(canonical)):
        continue
    print(f"{name}=={version}")
PYEOF
# 3. Wheels of them all (a package published only as source is built into a wheel here, once) and of wif.
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" -r "$WORK/requirements.txt"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" "$WORK/src"
echo "wheelhouse: $OUT  $(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1)$([ "$WITH_TORCH" = 1 ] || echo ', torch stack left out')"
