# syntax=docker/dockerfile:1
# The worker container of a TrainingJob that brings its own PyTorch program:
# the images examples/pytorch/mlp/trainingjob.yaml and
# examples/pytorch/cnn/trainingjob.yaml name. Build from the repository root:
#
#   docker build -f docker/pytorch-worker.Dockerfile --build-arg EXAMPLE=mlp -t kubeps/example-pytorch-mlp:0.1.0 .
#   docker build -f docker/pytorch-worker.Dockerfile --build-arg EXAMPLE=cnn -t kubeps/example-pytorch-cnn:0.1.0 .
#
# It holds Python, torch, the kubeps Python package, the data set and the
# program; not kubeps-agent. The operator adds the agent to the worker pod as
# a native sidecar from the agent image (README.md, "Your own training
# program"), so this image changes with kubeps only when the Python client does.
#
# Choices:
# - PyTorch is Debian's python3-torch (1.13, CPU only): the torch the examples
#   are developed and tested with (scripts/install-deps.sh), from the same
#   archive as the base image, without PyPI. --no-install-recommends matters
#   here: it recommends libtorch-dev and build-essential, a compiler the
#   program never uses.
# - The kubeps package is installed with pip into a venv that sees the
#   system's packages (Debian's Python refuses pip installs outside a venv,
#   PEP 668), in a build stage: pip, setuptools and wheel stay out of the
#   final image, and the package has no dependencies, so nothing is fetched.
#   Both stages are the same Debian release, so the venv's python3 link to
#   /usr/bin/python3 holds in the final stage. PATH puts the venv first: the
#   manifests run `python3`, which is then the venv's.
# - The data set is Debian's dataset-fashion-mnist, in the image at
#   /usr/share/datasets/fashion-mnist, the DATA_DIR the manifests set: the
#   examples run on any cluster as they are, with no volume to provide
#   (about 30 MB). Real data belongs in a volume: mount it in the pod
#   template and set DATA_DIR to its mount point.
# - One file, one image per example: EXAMPLE picks the folder. The program is
#   copied last, so both images share every layer before it. The layout is
#   the repository's: train.py in the working directory (the manifests run
#   `python3 train.py` and set no workingDir) and fashion_mnist.py, which
#   train.py imports, one folder up.
# - User 10001:10001, numeric so that runAsNonRoot can check it. It is the
#   agent image's user, which the operator gives the pod when neither the
#   container nor the pod template sets runAsUser: the agent's socket and
#   shared memory are mode 0600, so both containers must run as one user.
#   The program's files belong to root and are read-only to it; it writes in
#   the pod's emptyDirs and volumes.
#
# Your own train.py: copy this file into your project and, in the last stage,
# replace the ARG EXAMPLE, the two COPY lines of examples/ and the WORKDIR with
#   COPY . /app/
#   WORKDIR /app
# (your program and its modules, at the paths it imports them from); add the
# Debian packages it needs to the apt-get line, and drop dataset-fashion-mnist
# when your data comes from a volume. The build stage copies this repository's
# python/ folder: with your project as the build context, name a checkout of
# kubeps as a second context and copy from it there,
#   docker build --build-context kubeps=path/to/kubeps -t my-trainer:1 .
#   COPY --from=kubeps python python
# Then name the image, and `python3 train.py` (or your command), in your
# TrainingJob's worker template.
# For GPUs, start from an image with a CUDA build of torch instead: `pip
# install ./python` works with any Python 3.9 or later.
#
# Base images are pinned to a Debian 12 (bookworm) point release. For
# byte-for-byte reproducible builds pin their digests as well, e.g.
#   docker buildx imagetools inspect debian:12.11-slim
# then FROM debian:12.11-slim@sha256:<digest> (not done here: digests could
# not be looked up where this file was written, and a wrong one fails the build).

FROM debian:12.11-slim AS build
ARG DEBIAN_FRONTEND=noninteractive
# What an offline `pip install --no-build-isolation ./python` needs
# (scripts/install-deps.sh installs the same for a venv on a workstation).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-pip python3-setuptools python3-wheel \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY python python
# --without-pip: the system's pip, run by the venv's python3, installs into
# the venv; --no-index: nothing comes from PyPI.
RUN python3 -m venv --without-pip --system-site-packages /opt/venv \
 && /opt/venv/bin/python3 -m pip install --no-build-isolation --no-index --no-cache-dir \
      --root-user-action=ignore ./python

FROM debian:12.11-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3-torch \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kubeps \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin kubeps
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# A program's lines reach `kubectl logs` as they are printed, flushed or not.
ENV PYTHONUNBUFFERED=1
# Fails the build if the venv's python3 does not see both torch and kubeps.
RUN python3 -c "import torch, kubeps.torch"
ARG EXAMPLE=mlp
COPY examples/pytorch/fashion_mnist.py /app/
COPY examples/pytorch/${EXAMPLE}/train.py /app/${EXAMPLE}/
WORKDIR /app/${EXAMPLE}
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
# The manifests' command replaces this; it serves `docker run` of the image.
CMD ["python3", "train.py"]
