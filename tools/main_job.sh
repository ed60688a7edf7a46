#!/bin/sh
# The main job: every store of the shipped data, then the store contract checked on each.
# Used by `make run` (a LocalCluster per store) and by docker-compose's `precompute` service (on the cluster).
#
#   LABELDIST  the labeldist command          (default: labeldist)
#   PYTHON     python for tools/check_store.py (default: python3)
#   DATA       the shipped data folder         (default: data)
#   STORES     where the stores go             (default: stores)
#   MODELS     where fine-tuned models go      (default: models)
#   SCHEDULER  tcp://host:8786 of a running Dask scheduler (default: none, a LocalCluster per store)
#   MIN_WORKERS  workers of SCHEDULER each job waits for before it starts (default: 1; --min-workers)
#
# Reruns reuse finished stores and resume unfinished ones. The sentence store's scorer is MiniLM fine-tuned on
# STS-B (bi-encoder, cosine-similarity loss, 1 epoch, seed 0: about 5 min on 2 cores); it is trained only when
# $MODELS/sts-bi-cosine/labeldist_sts.json (written last, after the weights) is missing. The store records the
# weights' sha256: a store made with another model, or another training of it, is refused rather than mixed;
# remove that store (or add --overwrite to its line) to rebuild it.
set -eu
LABELDIST=${LABELDIST:-labeldist}
PYTHON=${PYTHON:-python3}
DATA=${DATA:-data}
STORES=${STORES:-stores}
MODELS=${MODELS:-models}
CLUSTER=""
if [ -n "${SCHEDULER:-}" ]; then CLUSTER="--scheduler $SCHEDULER --min-workers ${MIN_WORKERS:-1}"; fi

# shellcheck disable=SC2086  # CLUSTER is empty or four words on purpose
# poses centred and scaled by the MPII person scale: comparable across photos (raw pixels would make the nearest
# poses those of people of the same size at the same place in the picture)
$LABELDIST precompute pose "$DATA/mpii/mpii_valid_2958.csv" --normalization center_scale --k 100 \
    --out "$STORES/mpii-pose" $CLUSTER
# shellcheck disable=SC2086
$LABELDIST precompute layout --generate 2000 --layout-type 5 --size 128 --seed 0 --k 100 \
    --out "$STORES/lsun5-layout_miou" $CLUSTER
# shellcheck disable=SC2086
$LABELDIST precompute captions "$DATA/coco/coco_karpathy_test.json" --knn-only --k 100 \
    --out "$STORES/coco_karpathy_test-caption_wmd" $CLUSTER
if [ ! -f "$MODELS/sts-bi-cosine/labeldist_sts.json" ]; then
    # on STS-B's train and dev files, shipped with labeldist (its defaults)
    $LABELDIST sts fit --architecture bi --loss cosine --epochs 1 --seed 0 --out "$MODELS/sts-bi-cosine"
fi
# shellcheck disable=SC2086
$LABELDIST precompute sentences "$DATA/coco/coco_karpathy_test.json" --knn-only --k 100 \
    --scorer coarse_to_fine --model "$MODELS/sts-bi-cosine" \
    --out "$STORES/coco_karpathy_test-sentence_relevance" $CLUSTER

for store in "$STORES"/*/; do
    "$PYTHON" tools/check_store.py "$store"
done
