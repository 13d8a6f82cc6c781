# posenc service image.
#
# CPU image (default; python:3.11-slim):
#   docker build -t posenc .
#   # smaller: torch's CPU-only wheel instead of PyPI's CUDA-bundled one
#   docker build -t posenc --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .
#
# CUDA image (an nvidia/cuda runtime base with Python added, and a CUDA torch wheel):
#   docker build -t posenc:cuda --build-arg VARIANT=cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#   docker run --gpus all -p 8000:8000 -e POSENC_DEVICE=cuda posenc:cuda
#   (another CUDA release: --build-arg CUDA_BASE_IMAGE=nvidia/cuda:<tag>-runtime-ubuntu24.04
#    together with the matching TORCH_INDEX_URL, e.g. .../whl/cu126)
#
# Run:
#   docker run -p 8000:8000 -v "$PWD/models:/models:ro" \
#     -e POSENC_MODELS=gpt2=/models/gpt2.safetensors posenc
#
# Build arguments:
#   VARIANT          cpu (the default, also when empty) or cuda: the base stage the image uses
#   CPU_BASE_IMAGE   base of the cpu variant (python:3.11-slim)
#   CUDA_BASE_IMAGE  base of the cuda variant (an nvidia/cuda *-runtime-ubuntu24.04 image)
#   TORCH_SPEC       the torch requirement installed first (default: the lock's torch==X, hashed)
#   TORCH_INDEX_URL  a PyTorch wheel index (cpu, cu126, cu128, ...); empty: PyPI
#   PIP_FIND_LINKS   a folder of local wheels (container-check passes its CPU torch wheel here)
#
# Configuration is by POSENC_* environment variables (see README.md): POSENC_DEVICE,
# POSENC_MODELS, POSENC_MAX_ELEMENTS, POSENC_CACHE_BYTES, POSENC_API_KEY, POSENC_CORS_ORIGINS,
# POSENC_LOG_LEVEL, POSENC_LOG_FORMAT (text or json). Kubernetes: deploy/kubernetes/.

# VARIANT has no default here but `${VARIANT:-cpu}` below: podman/buildah 4.x decides which stages
# to build before it applies ARG defaults, and would skip base-cpu for `ARG VARIANT=cpu`.
ARG VARIANT
ARG CPU_BASE_IMAGE=python:3.11-slim
ARG CUDA_BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

# ---------------------------------------------------------------- base stages (one is used)
FROM ${CPU_BASE_IMAGE} AS base-cpu

FROM ${CUDA_BASE_IMAGE} AS base-cuda
# The CUDA runtime images carry no Python: Ubuntu 24.04's python3 (3.12) and venv.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# ---------------------------------------------------------------- the image
FROM base-${VARIANT:-cpu} AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# A virtual environment keeps the service's packages apart from the system Python's (and is
# needed on Ubuntu, whose Python refuses system-wide pip installs).
RUN python3 -m venv /opt/venv

# A non-root user with a fixed numeric id (Kubernetes' runAsNonRoot can check a number); it owns
# nothing in the image, so the code and the packages are read-only to the service.
RUN groupadd --system --gid 10001 posenc \
 && useradd --system --uid 10001 --gid posenc --create-home --home-dir /home/posenc \
        --shell /usr/sbin/nologin posenc

# Dependencies first, in their own layers, so that a code change does not reinstall torch.
# torch alone first: by default the release the lock pins, its block read from
# requirements/service.txt and checked against the lock's hashes: the local CPU build when
# PIP_FIND_LINKS gives it (--no-index: pip would prefer the index's file), else PyPI's, with its
# CUDA libraries on Linux (requirements/torch-cuda.txt, hashed too). A TORCH_SPEC or
# TORCH_INDEX_URL of your own (the CUDA variant's build) is another file than the lock's,
# installed as asked.
WORKDIR /app
COPY requirements/service.txt requirements/torch-cuda.txt ./requirements/
ARG TORCH_SPEC=
ARG TORCH_INDEX_URL=
ARG PIP_FIND_LINKS
RUN [ -n "$PIP_FIND_LINKS" ] || unset PIP_FIND_LINKS; \
    awk '/^torch==/ {on = 1} on {print; if ($0 !~ /\\$/) exit}' requirements/service.txt > /tmp/torch.txt; \
    if [ -z "$TORCH_SPEC$TORCH_INDEX_URL" ]; then \
        pip install --no-cache-dir --require-hashes --no-deps --no-index -r /tmp/torch.txt \
        || pip install --no-cache-dir --require-hashes --no-deps -r /tmp/torch.txt -r requirements/torch-cuda.txt; \
    else \
        TORCH_SPEC=${TORCH_SPEC:-$(grep -o -E '^torch==[^ ]+' requirements/service.txt)}; \
        pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"; \
    fi

# Then the rest, exactly as the lock pins it (requirements/service.txt, written by pip-compile
# from pyproject.toml: the service, client and otel extras and the build requirements), every
# file checked against its sha256 there; --no-deps, since the lock is the whole closure (and torch
# is installed already).
RUN [ -n "$PIP_FIND_LINKS" ] || unset PIP_FIND_LINKS; \
    pip install --no-cache-dir --require-hashes --no-deps -r requirements/service.txt

# The code, installed without dependencies (all there already) and without build isolation
# (setuptools is there already, pinned by the lock), so this step needs no network.
COPY pyproject.toml README.md ./
COPY posenc/ ./posenc/
COPY service/ ./service/
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
 && rm -rf build ./*.egg-info \
 && python -c "import posenc, service"

# Everything below runs as this user.
USER 10001:10001

# Defaults of the service's settings; override with -e / compose / a Kubernetes env.
ENV POSENC_DEVICE=auto \
    POSENC_LOG_LEVEL=info

EXPOSE 8000

# Ready once the models are loaded; /healthz (liveness) answers earlier. Python, since the slim
# base has no curl. Start-up imports torch, which takes a while on a small CPU share.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4).status == 200 else 1)"]

# uvicorn shuts down gracefully (finishes in-flight requests) on SIGTERM.
STOPSIGNAL SIGTERM

# The same start command as the tests use, listening on all interfaces.
CMD ["python", "-m", "service", "--host", "0.0.0.0", "--port", "8000"]
