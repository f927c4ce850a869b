# A GPU container that runs the gpufeed benchmarks.
#   docker build -t gpufeed .
#   docker run --gpus all --rm -v $PWD/bench/results:/app/bench/results gpufeed            # gpufeed bench
#   docker run --gpus all --rm gpufeed gpufeed bench tabular
#   docker run --gpus all --rm gpufeed gpufeed doctor
# The CUDA 13 stack (DALI, cupy, cuDF) matches PyPI's default torch; the driver on the
# host must support CUDA 13.
FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    GPUFEED_CACHE=/app/.cache VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev git make \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

WORKDIR /app
# Dependencies first (cached layer), then the source.
COPY pyproject.toml README.md ./
COPY gpufeed/__init__.py gpufeed/__init__.py
RUN pip install --upgrade pip && pip install ".[cuda13,dask,hdf5]" && pip uninstall -y gpufeed
COPY . .
RUN pip install --no-deps -e . && pip check

CMD ["gpufeed", "bench"]
