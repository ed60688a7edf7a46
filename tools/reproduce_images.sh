#!/bin/sh
# Kim et al. Fig. 3 and Fig. 5 on images (RESULTS.md, "On images"): a train and a test store of MPII poses and of
# LSUN-type room layouts, one image per item rendered from its label, then every method of labeldist.trainer.reproduce
# trained on the train images with a CNN and evaluated on the test images, through a labeldist service.
#
#   PYTHON    python with labeldist installed        (default: .venv/bin/python)
#   RUNS      work folder: stores, images, runs       (default: /tmp/image-runs)
#   PX        rendered image side in pixels           (default: 128)
#   BACKBONE  torchvision ResNet                      (default: resnet18)
#   STEPS     steps per training run                  (default: 1000)
#   SEEDS     seeds of the 128-d runs                 (default: "0 1"; the 16-d runs use seed 0)
#   DATASETS  which of "mpii lsun" to train           (default: both)
#   LSUN_N    generated layouts: train and test       (default: "2000 500")
#   METHODS   labeldist.trainer.reproduce methods               (default: all but the unsquared log-ratio variant)
#   PORT      the service's port on 127.0.0.1         (default: 8766)
#
# Reruns reuse the stores, images and finished runs. On one H100 (16 cores) the whole script took the time
# RESULTS.md gives; on a 2-core CPU, size it down (PX=32 STEPS=20 SEEDS=0 LSUN_N="200 100").
set -eu
PYTHON=${PYTHON:-.venv/bin/python}
R=${RUNS:-/tmp/image-runs}
PX=${PX:-128}
BACKBONE=${BACKBONE:-resnet18}
STEPS=${STEPS:-1000}
SEEDS=${SEEDS:-0 1}
DATASETS=${DATASETS:-mpii lsun}
LSUN_N=${LSUN_N:-2000 500}
METHODS=${METHODS:-log_ratio dense_triplet binary_triplet lifted proxy_anchor multi_similarity}
PORT=${PORT:-8766}
S=$R/stores
set -- $LSUN_N
LSUN_TRAIN=$1
LSUN_TEST=$2

# the MPII split of RESULTS.md: 2,366 train / 592 test poses (118 queries, 474 gallery)
[ -f "$R/mpii/split.json" ] || $PYTHON -m labeldist.trainer.cli split data/mpii/mpii_valid_2958.csv --out "$R/mpii" --seed 0
for part in train test; do
    $PYTHON -m labeldist.cli precompute pose "$R/mpii/$part.csv" --normalization center_scale --k 100 \
        --dataset "mpii-$part" --out "$S/mpii-$part-pose" --no-progress
done
# layouts: two generated sets (seed 0 to train, seed 1 to test); the first fifth of the test set are the queries
$PYTHON -m labeldist.cli precompute layout --generate "$LSUN_TRAIN" --layout-type 5 --size 128 --seed 0 --k 100 \
    --dataset lsun-train --out "$S/lsun-train-layout_miou" --no-progress
$PYTHON -m labeldist.cli precompute layout --generate "$LSUN_TEST" --layout-type 5 --size 128 --seed 1 --k 100 \
    --dataset lsun-test --out "$S/lsun-test-layout_miou" --no-progress
mkdir -p "$R/lsun"
$PYTHON -c "import json, sys; n = int(sys.argv[1]); q = n // 5
json.dump({'queries': list(range(q)), 'gallery': list(range(q, n))}, open(sys.argv[2], 'w'))" \
    "$LSUN_TEST" "$R/lsun/split.json"
for store in mpii-train-pose mpii-test-pose lsun-train-layout_miou lsun-test-layout_miou; do
    $PYTHON -m labeldist.trainer.cli render "$S/$store" --out "$R/images/$store" --size "$PX" --format jpg --no-progress
done

LABELDIST_ACCESS_LOG=false $PYTHON -m labeldist.cli serve --stores "$S" --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT INT TERM
$PYTHON -c "import httpx, time, sys
for _ in range(240):
    try:
        if httpx.get(sys.argv[1] + '/healthz', timeout=1).status_code == 200: sys.exit(0)
    except httpx.TransportError: time.sleep(0.5)
sys.exit('the service did not come up')" "http://127.0.0.1:$PORT"

for dataset in $DATASETS; do
    # shellcheck disable=SC2086  # SEEDS and METHODS are lists on purpose
    $PYTHON -m labeldist.trainer.reproduce --url "http://127.0.0.1:$PORT" --dataset "$dataset" --runs "$R" --images \
        --backbone "$BACKBONE" --max-steps "$STEPS" --seeds $SEEDS --small-dim-seeds 0 --dims 128 16 \
        --methods $METHODS --k-max 100
done
