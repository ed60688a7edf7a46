#!/bin/sh
# The training issue's GPU check, sized for one short GPU window (about 8 minutes of an H100): MPII poses rendered at 128 px,
# ResNet-18 from random weights trained with the recipe that learns on a 2-core CPU (scratch: every member of a
# minibatch an anchor, Adam 1e-3, minibatches of 32), two methods (the log-ratio and the dense triplet loss), one
# seed each, evaluated on the test split every CURVE steps and printed beside the untrained network and the ceiling
# (a perfect model of the test pictures). Every stage prints its seconds.
#
# On a lent GPU machine, from the repository root (its python3 holds torch and torchvision, not the project):
#   sh tools/gpu_wheels.sh                   # here, once: the wheels it lacks, into .whl/ (carried with the call)
#   sh tools/gpu_images.sh                   # there: installs .whl/ and the project into /tmp/site, then runs
# Elsewhere (the project installed):  PYTHON=.venv/bin/python sh tools/gpu_images.sh
#
#   RUNS     work folder                          (default: /tmp/gpu-images)
#   PX       rendered image side                  (default: 128)
#   EPOCHS   epochs per method (2,366 steps each) (default: 3; an H100 took 17 ms a ResNet-18 step of 150
#            128-px images, so about 10 ms one of 32: 3 epochs are about 70 s a method)
#   CURVE    evaluate every CURVE steps           (default: 1500)
#   METHODS  labeldist.trainer.experiments.reproduce methods  (default: "log_ratio dense_triplet")
#   EXTRA    more reproduce options, e.g. "--augment kind --tag kind"
set -eu
R=${RUNS:-/tmp/gpu-images}
PX=${PX:-128}
EPOCHS=${EPOCHS:-3}
CURVE=${CURVE:-1500}
METHODS=${METHODS:-log_ratio dense_triplet}
EXTRA=${EXTRA:-}
T0=$(date +%s)
stage() { echo "== $1 ($(($(date +%s) - T0)) s)"; }

if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    SITE=/tmp/site
    stage "installing .whl/ and the project into $SITE"
    [ -d .whl ] || { echo "gpu_images: no .whl/ folder: run tools/gpu_wheels.sh here first and carry .whl" >&2; exit 1; }
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
    $PYTHON -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$SITE" .
    # the research scripts are not in the wheel: they run from this checkout, beside the installed product
    cp -R trainer/experiments "$SITE/labeldist/trainer/experiments"
    # the installed labeldist, never the source folder of the working directory (labeldist.trainer lives in trainer/)
    export PYTHONPATH="$SITE" PYTHONSAFEPATH=1
fi
export PYTHONUNBUFFERED=1
$PYTHON -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

stage "stores and renders"
PYTHON=$PYTHON RUNS=$R PX=$PX DATASETS=mpii PREPARE_ONLY=1 sh tools/reproduce_images.sh
reproduce() {
    # shellcheck disable=SC2086  # EXTRA and the methods are lists on purpose
    $PYTHON -m labeldist.trainer.experiments.reproduce --stores "$R/stores" --dataset mpii --runs "$R" --images \
        --backbone resnet18 --recipe scratch --epochs "$EPOCHS" --curve-every "$CURVE" --seeds 0 --dims 128 \
        --k-max 100 $EXTRA --methods "$@" >/dev/null
}
for method in $METHODS; do  # one at a time: each method's curve is printed as soon as it is done
    stage "training $method ($EPOCHS epochs)"
    reproduce "$method"
    cat "$R/mpii/curve"*.md
done
stage "the table (every run reused)"
# shellcheck disable=SC2086  # METHODS is a list on purpose
reproduce $METHODS
cat "$R/mpii/table"*.md "$R/mpii/curve"*.md
stage "done"
