#!/bin/sh
# Kim et al. Fig. 3 and Fig. 5 on images (RESULTS.md, "On images"): a train and a test store of MPII poses and of
# LSUN-type room layouts, one image per item rendered from its label (poses in the label's own frame: the test
# store in its train render's frame), then every method of labeldist.trainer.experiments.reproduce trained on the train images
# with a CNN and a recipe (by default scratch, the one that learns from random weights), reading the stores
# in-process (--stores: no service), and evaluated on the test images beside the untrained network (ranked both
# ways) and the ceiling (a perfect model of the pictures).
#
#   PYTHON    python with labeldist installed        (default: .venv/bin/python)
#   RUNS      work folder: stores, images, runs       (default: /tmp/image-runs)
#   PX        rendered image side in pixels           (default: 128)
#   BACKBONE  torchvision ResNet                      (default: resnet18)
#   RECIPE    labeldist.trainer.training.recipes               (default: auto = scratch, from random weights)
#   STEPS     steps per training run                  (default: the recipe's epochs)
#   SIZE      minibatch size                          (default: the recipe's; scratch 32, kim2019 150)
#   CURVE     evaluate every 128-d run every CURVE steps (default: 500)
#   SEEDS     seeds of the 128-d runs                 (default: "0 1 2"; the 16-d runs use seed 0)
#   DIMS      embedding sizes                         (default: "128 16")
#   ANCHORS   first or all: override the recipe's     (default: the recipe's)
#   DATASETS  which of "mpii lsun" to train           (default: both)
#   LSUN_N    generated layouts: train and test       (default: "2000 500")
#   METHODS   labeldist.trainer.experiments.reproduce methods               (default: all but the unsquared log-ratio variant)
#   EXTRA     more reproduce options (e.g. "--augment imagenet --allow-image-flip --tag imagenet")
#   PREPARE_ONLY  set: only the stores, splits and renders
#
# Reruns reuse the stores, images and finished runs. On a 2-core CPU, size it down (PX=64 STEPS=1500 SEEDS=0
# DIMS=128 METHODS=log_ratio DATASETS=mpii: RESULTS.md's CPU rows); tools/gpu_images.sh is the run sized for one
# GPU window.
set -eu
PYTHON=${PYTHON:-.venv/bin/python}
R=${RUNS:-/tmp/image-runs}
PX=${PX:-128}
BACKBONE=${BACKBONE:-resnet18}
RECIPE=${RECIPE:-auto}
CURVE=${CURVE:-500}
SEEDS=${SEEDS:-0 1 2}
DIMS=${DIMS:-128 16}
DATASETS=${DATASETS:-mpii lsun}
LSUN_N=${LSUN_N:-2000 500}
METHODS=${METHODS:-log_ratio dense_triplet binary_triplet lifted proxy_anchor multi_similarity}
EXTRA=${EXTRA:-}
S=$R/stores
set -- $LSUN_N
LSUN_TRAIN=$1
LSUN_TEST=$2
STEP_ARGS=""
[ -n "${STEPS:-}" ] && STEP_ARGS="--max-steps $STEPS"
[ -n "${SIZE:-}" ] && STEP_ARGS="$STEP_ARGS --size $SIZE"
[ -n "${ANCHORS:-}" ] && STEP_ARGS="$STEP_ARGS --anchors $ANCHORS"

prepare_mpii() {
    # the MPII split of RESULTS.md: 2,366 train / 592 test poses (118 queries, 474 gallery)
    [ -f "$R/mpii/split.json" ] || $PYTHON -m labeldist.trainer.cli split data/mpii/mpii_valid_2958.csv --out "$R/mpii" --seed 0
    for part in train test; do
        $PYTHON -m labeldist.cli precompute pose "$R/mpii/$part.csv" --normalization center_scale --k 100 \
            --dataset "mpii-$part" --out "$S/mpii-$part-pose" --no-progress
    done
    $PYTHON -m labeldist.trainer.cli render "$S/mpii-train-pose" --out "$R/images/mpii-train-pose" --size "$PX" \
        --format jpg --no-progress
    # the test store in its train render's frame: the same label, the same picture
    $PYTHON -m labeldist.trainer.cli render "$S/mpii-test-pose" --out "$R/images/mpii-test-pose" --size "$PX" \
        --format jpg --no-progress --frame-from "$R/images/mpii-train-pose"
}

prepare_lsun() {
    # layouts: two generated sets (seed 0 to train, seed 1 to test); the first fifth of the test set are the queries
    $PYTHON -m labeldist.cli precompute layout --generate "$LSUN_TRAIN" --layout-type 5 --size 128 --seed 0 --k 100 \
        --dataset lsun-train --out "$S/lsun-train-layout_miou" --no-progress
    $PYTHON -m labeldist.cli precompute layout --generate "$LSUN_TEST" --layout-type 5 --size 128 --seed 1 --k 100 \
        --dataset lsun-test --out "$S/lsun-test-layout_miou" --no-progress
    mkdir -p "$R/lsun"
    $PYTHON -c "import json, sys; n = int(sys.argv[1]); q = n // 5
json.dump({'queries': list(range(q)), 'gallery': list(range(q, n))}, open(sys.argv[2], 'w'))" \
        "$LSUN_TEST" "$R/lsun/split.json"
    for part in train test; do
        $PYTHON -m labeldist.trainer.cli render "$S/lsun-$part-layout_miou" --out "$R/images/lsun-$part-layout_miou" \
            --size "$PX" --format jpg --no-progress
    done
}

for dataset in $DATASETS; do
    "prepare_$dataset"
    [ -z "${PREPARE_ONLY:-}" ] || continue
    # shellcheck disable=SC2086  # SEEDS, DIMS, METHODS, STEP_ARGS and EXTRA are lists on purpose
    $PYTHON -m labeldist.trainer.experiments.reproduce --stores "$S" --dataset "$dataset" --runs "$R" --images \
        --backbone "$BACKBONE" --recipe "$RECIPE" $STEP_ARGS --curve-every "$CURVE" --seeds $SEEDS \
        --small-dim-seeds 0 --dims $DIMS --methods $METHODS --k-max 100 $EXTRA
done
