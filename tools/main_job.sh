#!/bin/sh
# The main job: every store of the shipped data, then the store contract checked on each.
# Used by `make run` (a LocalCluster per store) and by docker-compose's `precompute` service (on the cluster).
#
#   LABELDIST  the labeldist command          (default: labeldist)
#   PYTHON     python for tools/check_store.py (default: python3)
#   DATA       the shipped data folder         (default: data)
#   STORES     where the stores go             (default: stores)
#   SCHEDULER  tcp://host:8786 of a running Dask scheduler (default: none, a LocalCluster per store)
#
# Reruns reuse finished stores and resume unfinished ones.
set -eu
LABELDIST=${LABELDIST:-labeldist}
PYTHON=${PYTHON:-python3}
DATA=${DATA:-data}
STORES=${STORES:-stores}
CLUSTER=""
if [ -n "${SCHEDULER:-}" ]; then CLUSTER="--scheduler $SCHEDULER"; fi

# shellcheck disable=SC2086  # CLUSTER is empty or two words on purpose
$LABELDIST precompute pose "$DATA/mpii/mpii_valid_2958.csv" --k 100 --out "$STORES/mpii-pose" $CLUSTER
# shellcheck disable=SC2086
$LABELDIST precompute layout --generate 2000 --layout-type 5 --size 128 --seed 0 --k 100 \
    --out "$STORES/lsun5-layout_miou" $CLUSTER
# shellcheck disable=SC2086
$LABELDIST precompute captions "$DATA/coco/coco_karpathy_test.json" --knn-only --k 100 \
    --out "$STORES/coco_karpathy_test-caption_wmd" $CLUSTER
# shellcheck disable=SC2086
$LABELDIST precompute sentences "$DATA/coco/coco_karpathy_test.json" --knn-only --k 100 \
    --out "$STORES/coco_karpathy_test-sentence_relevance" $CLUSTER

for store in "$STORES"/*/; do
    "$PYTHON" tools/check_store.py "$store"
done
