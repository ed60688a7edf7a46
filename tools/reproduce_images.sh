#!/bin/sh
# Kim et al. Fig. 3 and Fig. 5 on images (RESULTS.md, "On images"): a train and a test store of MPII poses and of
# LSUN-type room layouts, one image per item rendered from its label (poses in the label's own frame: the test
# store in its train render's frame), then every method of labeldist.trainer.reproduce trained on the train images
# with a CNN and the papers' recipe, reading the stores in-process (--stores: no service), and evaluated on the
# test images beside the untrained network (ranked both ways) and the ceiling (a perfect model of the pictures).
#
#   PYTHON    python with labeldist installed        (default: .venv/bin/python)
#   RUNS      work folder: stores, images, runs       (default: /tmp/image-runs)
#   PX        rendered image side in pixels           (default: 128)
#   BACKBONE  torchvision ResNet                      (default: resnet18)
#   RECIPE    labeldist.trainer.recipes               (default: auto = kim2019-pose / kim2019-layout)
#   STEPS     steps per training run                  (default: the recipe's 30 epochs)
#   SIZE      minibatch size                          (default: the recipe's 150)
#   CURVE     evaluate seed 0 of each method every CURVE steps (default: 500)
#   SEEDS     seeds of the 128-d runs                 (default: "0 1 2"; the 16-d runs use seed 0)
#   DATASETS  which of "mpii lsun" to train           (default: both)
#   LSUN_N    generated layouts: train and test       (default: "2000 500")
#   METHODS   labeldist.trainer.reproduce methods               (default: all but the unsquared log-ratio variant)
#   EXTRA     more reproduce options (e.g. "--augment imagenet --allow-image-flip --tag imagenet")
#
# Reruns reuse the stores, images and finished runs. On a 2-core CPU, size it down (PX=64 STEPS=2000 SIZE=32
# SEEDS=0 METHODS=log_ratio DATASETS=mpii: RESULTS.md's CPU rows).
set -eu
PYTHON=${PYTHON:-.venv/bin/python}
R=${RUNS:-/tmp/image-runs}
PX=${PX:-128}
BACKBONE=${BACKBONE:-resnet18}
RECIPE=${RECIPE:-auto}
CURVE=${CURVE:-500}
SEEDS=${SEEDS:-0 1 2}
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
for d in mpii-pose lsun-layout_miou; do
    train=$(echo "$d" | sed 's/-/-train-/')
    test=$(echo "$d" | sed 's/-/-test-/')
    $PYTHON -m labeldist.trainer.cli render "$S/$train" --out "$R/images/$train" --size "$PX" --format jpg --no-progress
    FRAME=""
    [ "$d" = mpii-pose ] && FRAME="--frame-from $R/images/$train"
    # shellcheck disable=SC2086  # FRAME is empty or two words
    $PYTHON -m labeldist.trainer.cli render "$S/$test" --out "$R/images/$test" --size "$PX" --format jpg --no-progress $FRAME
done

for dataset in $DATASETS; do
    # shellcheck disable=SC2086  # SEEDS, METHODS, STEP_ARGS and EXTRA are lists on purpose
    $PYTHON -m labeldist.trainer.reproduce --stores "$S" --dataset "$dataset" --runs "$R" --images \
        --backbone "$BACKBONE" --recipe "$RECIPE" $STEP_ARGS --curve-every "$CURVE" --seeds $SEEDS \
        --small-dim-seeds 0 --dims 128 16 --methods $METHODS --k-max 100 $EXTRA
done
