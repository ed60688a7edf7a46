# The image of every service of docker-compose.yml, built with the extras (pyproject.toml) its commands need:
# EXTRAS=all (the default) for the api and the trainer; docker-compose.yml builds the Dask side (scheduler, workers,
# the main job) with EXTRAS=sts, the text kinds' packages and no FastAPI, torchvision or trainer. EXTRAS= (empty)
# is the engine alone: enough for a cluster of pose, vectors and layout jobs, and no torch at all.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    LABELDIST_STORES=/stores
WORKDIR /app

ARG EXTRAS=all
# torch first, pinned by build argument, from pip's own configured index (PIP_INDEX_URL, pip.conf) unless
# --build-arg TORCH_INDEX=URL names one (PyTorch's CPU-only or CUDA wheel index; docker-compose.gpu.yml names a CUDA
# one): the project writes no index address of its own into the image.
# [train] needs torch, torchvision and torchcodec, [sts] torch alone (sentence-transformers), the engine neither.
ARG TORCH=torch==2.14.1
ARG TORCHVISION=torchvision==0.29.1
# the TorchCodec release built beside that torch (its wheel declares no torch dependency, so pip cannot check the pair)
ARG TORCHCODEC=torchcodec==0.17.0
ARG TORCH_INDEX=
RUN case ",$EXTRAS," in \
      *,all,*|*,train,*) set -- "$TORCH" "$TORCHVISION" "$TORCHCODEC" ;; \
      *,sts,*) set -- "$TORCH" ;; \
      *) set -- ;; \
    esac; \
    if [ "$#" -gt 0 ]; then \
      if [ -n "$TORCH_INDEX" ]; then pip install --extra-index-url "$TORCH_INDEX" "$@"; else pip install "$@"; fi; \
    fi

# Every path pyproject.toml maps into the package (its packages, package-dir, package-data and readme), and only
# those, before the install: tests/system/test_image.py checks this list against pyproject.toml and installs from
# exactly these files. The build context leaves out what .dockerignore names (.venv, stores, models, runs, ...).
COPY pyproject.toml README.md ./
COPY labeldist labeldist
COPY api api
COPY client client
COPY trainer trainer
RUN pip install -e ".${EXTRAS:+[$EXTRAS]}"

COPY data data
COPY tools tools

# The workers write store chunks, so every service mounts the same volume at /stores.
VOLUME ["/stores"]
EXPOSE 8000 8786 8787
CMD ["labeldist", "--help"]
