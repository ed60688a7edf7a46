#!/bin/sh
# docker-compose.yml for real on a small subset (docker-compose.small.yml), with podman and podman-compose where
# Docker has no engine: build the image, start the scheduler and two workers, run the main job on the cluster,
# start the api, query it from the host, run a short training through it, tear everything down. Each stage timed.
#
#   sh tools/compose_small.sh        # make compose-small; ../shared/tools/podman-setup prepares podman first
#
# Torch comes from pip's own configured index, as every package does; TORCH_INDEX=URL names another for it.
set -eu
cd "$(dirname "$0")/.."
COMPOSE=${COMPOSE:-.venv/bin/podman-compose}
PROJECT=labeldist-small
TORCH_INDEX=${TORCH_INDEX:-}
export LABELDIST_API_KEY="${LABELDIST_API_KEY:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}"
compose() { "$COMPOSE" -p "$PROJECT" -f docker-compose.yml -f docker-compose.small.yml "$@"; }
stage() { now=$(date +%s); echo "== $1 (after $((now - START)) s)"; }
START=$(date +%s)
cleanup() { stage "down"; compose down -v >/dev/null 2>&1 || true; }
trap cleanup EXIT

stage "build labeldist:latest (EXTRAS=all)"
if ! podman image exists localhost/labeldist:latest; then
  BUILDAH_ISOLATION=chroot podman build --network host --pull=never --build-arg EXTRAS=all \
    --build-arg TORCH_INDEX="$TORCH_INDEX" -t labeldist:latest .
fi
stage "scheduler and two workers"
compose up -d --scale worker=2 scheduler worker
stage "main job on the cluster"
compose run --rm precompute
stage "api"
compose up -d --no-deps api  # its dependency, the main job, has run to its end above
i=0
until curl -fsS http://127.0.0.1:8000/healthz >/dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -lt 120 ] || { echo "the api did not answer /healthz"; compose logs api; exit 1; }
  sleep 1
done
stage "query the api from the host"
curl -fsS http://127.0.0.1:8000/v1/stores | head -c 300; echo
curl -fsS 'http://127.0.0.1:8000/v1/stores/mpii-pose/items/0/neighbors?k=5'; echo
stage "short training through the api"
compose run --rm --no-deps trainer
stage "done"
