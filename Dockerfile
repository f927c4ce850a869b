# Containers that run the gpufeed benchmarks: a GPU image (default) and a CPU variant.
#
#   docker build -t gpufeed --build-arg GIT_COMMIT="$(git rev-parse HEAD)" .   # GPU: CUDA 13 base, DALI + cupy + cuDF
#   mkdir -p results   # then the container (as you, with room in /dev/shm) writes there:
#   docker run --gpus all --rm --shm-size=16g --user "$(id -u):$(id -g)" -v "$PWD/results:/results" gpufeed
#   docker run --gpus all --rm gpufeed gpufeed doctor
#
#   docker build -t gpufeed-cpu --build-arg BASE=ubuntu:24.04 --build-arg EXTRAS=dali-cpu,dask,hdf5 .
#   docker run --rm --shm-size=16g --user "$(id -u):$(id -g)" -v "$PWD/results:/results" gpufeed-cpu
#
# The install is the README's own: `make install` (the target `make test` and `make bench`
# build on), so CI tests what the image runs. The CUDA 13 stack matches PyPI's default
# torch; the host's driver must support CUDA 13.
# Why a CUDA runtime base and not the smaller `-base-` one: torch's wheels bring their own CUDA
# libraries and cuDNN, but cupy-cuda13x (the cuda13 extra, without cupy's [ctk] extra) loads
# NVRTC, cuBLAS, cuRAND ... from a system CUDA toolkit, which the `-base-` image does not have.
# The base's cuDNN is unused (torch loads its own); a cuDNN-free runtime base has not been built.
ARG BASE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
FROM ${BASE}
ARG EXTRAS=cuda13,dask,hdf5

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Caches under /tmp: a run as any user (`--user "$(id -u):$(id -g)"`, so results on the
# mounted folder are the caller's) can write them; the home folder is only uid 1000's.
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    GPUFEED_CACHE=/tmp/gpufeed-cache MPLCONFIGDIR=/tmp/matplotlib PATH=/opt/venv/bin:$PATH
# Distribution packages are not pinned: the base image's release pins them. Ubuntu 23.04
# and later images ship a user "ubuntu" with uid 1000, which made `useradd --uid 1000` fail
# ("UID 1000 is not unique") on the CUDA and ubuntu:24.04 bases: it is removed first.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv make \
 && rm -rf /var/lib/apt/lists/* \
 && (if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi) \
 && useradd --create-home --uid 1000 gpufeed \
 && mkdir -p /app /opt/venv /results && chown gpufeed:gpufeed /app /opt/venv /results

USER 1000:1000
WORKDIR /app
# Dependencies first (a cached layer), then the source.
COPY --chown=gpufeed:gpufeed pyproject.toml README.md Makefile ./
COPY --chown=gpufeed:gpufeed gpufeed/__init__.py gpufeed/__init__.py
RUN make install VENV=/opt/venv EXTRAS="${EXTRAS}"
COPY --chown=gpufeed:gpufeed . .
RUN pip check
# The image holds no .git: results name the commit the build was given (--build-arg GIT_COMMIT=...).
ARG GIT_COMMIT=
ENV GPUFEED_GIT_COMMIT=${GIT_COMMIT}

VOLUME ["/results"]
CMD ["gpufeed", "bench", "all", "--out", "/results"]
