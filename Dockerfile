# One image for every service of docker-compose.yml: dask scheduler and workers, precompute, api, trainer.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    LABELDIST_STORES=/stores
WORKDIR /app

# torch first, pinned by build argument: the CPU wheel by default, e.g. --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 for CUDA
ARG TORCH=torch==2.14.1
ARG TORCHVISION=torchvision==0.29.1
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple "$TORCH" "$TORCHVISION"

# Every path pyproject.toml maps into the package (its packages, package-dir, package-data and readme), and only
# those, before the install: tests/system/test_image.py checks this list against pyproject.toml and installs from
# exactly these files. The build context leaves out what .dockerignore names (.venv, stores, models, runs, ...).
COPY pyproject.toml README.md ./
COPY labeldist labeldist
COPY api api
COPY client client
COPY trainer trainer
RUN pip install -e .

COPY data data
COPY tools tools

# The workers write store chunks, so every service mounts the same volume at /stores.
VOLUME ["/stores"]
EXPOSE 8000 8786 8787
CMD ["labeldist", "--help"]
