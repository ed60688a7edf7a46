#!/bin/sh
# Small stores of every built-in kind, two of them grown by an append: what a change that must not alter the
# engine's output is checked with. Build them with the version before the change and with the change, then
#   python tools/compare_stores.py OLD/stores NEW/stores
#
#   sh tools/sample_stores.sh OUT          # OUT/inputs (generated, seed 0) and OUT/stores
#   PYTHON   the python whose labeldist builds them (default: python3; an older tree: PYTHONPATH=its install)
#   DATA     the shipped data folder (default: data, beside this script)
#
# The stores: vectors 500 x 8 dense (symmetric) then 100 appended; MPII's 2,958 poses kNN-only (k 20); 300
# generated layouts dense; 300 COCO images' captions dense then 50 appended; 300 sentences under CBoW.
set -eu
OUT=$1
PYTHON=${PYTHON:-python3}
DATA=${DATA:-$(cd "$(dirname "$0")/.." && pwd)/data}
IN=$OUT/inputs
S=$OUT/stores
mkdir -p "$IN" "$S"
"$PYTHON" - "$IN" "$DATA" <<'PY'
import json, sys
import numpy as np
folder, data = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
np.save(f"{folder}/v500.npy", rng.normal(size=(500, 8)).astype("float32"))
np.save(f"{folder}/v100.npy", rng.normal(size=(100, 8)).astype("float32"))
images = json.load(open(f"{data}/coco/coco_karpathy_test.json"))
json.dump(images[:300], open(f"{folder}/cap300.json", "w"))
json.dump(images[300:350], open(f"{folder}/cap50.json", "w"))
PY
L() { "$PYTHON" -c "import sys; from labeldist.cli import main; sys.exit(main())" "$@"; }
one="--workers 1 --no-progress"
# shellcheck disable=SC2086  # $one is several words on purpose
L precompute vectors "$IN/v500.npy" --k 10 --dense --out "$S/vec" $one
L append "$S/vec" "$IN/v100.npy" --no-progress
# shellcheck disable=SC2086
L precompute pose "$DATA/mpii/mpii_valid_2958.csv" --normalization center_scale --k 20 --knn-only --out "$S/pose" $one
# shellcheck disable=SC2086
L precompute layout --generate 300 --layout-type 5 --size 64 --seed 0 --k 10 --out "$S/layout" $one
# shellcheck disable=SC2086
L precompute captions "$IN/cap300.json" --k 10 --dense --out "$S/cap" $one
L append "$S/cap" "$IN/cap50.json" --no-progress
# shellcheck disable=SC2086
L precompute sentences "$DATA/coco/coco_karpathy_test.json" --limit 300 --scorer cbow --k 10 --out "$S/sent" $one
