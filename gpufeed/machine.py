"""Facts about this machine, gathered in one place: CPU, GPU, cores, installed libraries.

Everything here is read without importing DALI, cuDF or cupy (``importlib`` metadata and
``find_spec``), so ``gpufeed doctor``, the backend choices and the benchmark metadata can
all ask it on a CPU-only machine without loading a CUDA-only library.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

#: The pip distribution names of each GPU library, in the order gpufeed prefers them
#: (the CUDA 13 build first: it matches PyPI's default torch).
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "DALI": ("nvidia-dali-cuda130", "nvidia-dali-cuda120"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "cuDF": ("cudf-cu13", "cudf-cu12", "cudf"),
}

def install_hint(extra: str) -> str:
    """The command that adds gpufeed's optional ``extra`` (``"cuda13"``, ``"hdf5"``...), for
    messages: gpufeed is installed from its clone (not on PyPI), so ``pip install
    'gpufeed[cuda13]'`` would look for it on PyPI and fail, or find another package."""
    return f"pip install -e '.[{extra}]' in gpufeed's clone"


#: Distributions whose versions go into every benchmark result's metadata.
PACKAGES: tuple[str, ...] = (
    "gpufeed", "torch", "torchvision", "kornia", "numpy", "pandas", "polars", "pyarrow",
    "narwhals", "pillow", *DISTRIBUTIONS["DALI"], *DISTRIBUTIONS["cupy"][:2],
    *DISTRIBUTIONS["cuDF"][:2], "dask",
)


def installed(module: str) -> bool:
    """True when ``module`` can be imported, checked without importing it."""
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version_of(*distributions: str) -> str | None:
    """Version of the first installed distribution among ``distributions``, else None."""
    for dist in distributions:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def library_version(library: str) -> str | None:
    """Installed version of a GPU library named as in :data:`DISTRIBUTIONS` ("DALI", ...)."""
    return version_of(*DISTRIBUTIONS[library])


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when torch sees a usable CUDA device."""
    import torch

    return torch.cuda.is_available()


def nvidia_gpu_listed() -> bool:
    """Whether the NVIDIA driver lists a GPU here (``/proc/driver/nvidia/gpus``), read
    without importing torch: for wording advice on a table-only path, never for choosing a
    device (:func:`cuda_available` decides that)."""
    try:
        return any(Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return False


def available_memory() -> int:
    """Bytes this process can still take: ``MemAvailable`` of ``/proc/meminfo``, or less
    when a cgroup limit (``/sys/fs/cgroup/memory.max`` less ``memory.current``) is lower.

    Returns:
        The bytes; ``sys.maxsize`` where neither can be read (not Linux).
    """
    available = _meminfo_available()
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text().strip())
            available = min(available, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit here
    return available


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except OSError:
        pass
    return sys.maxsize


def usable_cpus() -> int:
    """Cores this process may run on (affinity-aware, so containers are not oversubscribed)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def die_with_parent() -> None:
    """On Linux, have this (child) process killed when the one that started it dies: a
    parent killed alone (``kill``, a CI timeout, the OOM killer) left benchmark contenders
    timing on for minutes, and the DALI feed's workers waiting for work forever."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import multiprocessing as mp
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: the child ends with its work, as before
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the request: no signal will come
        os._exit(1)


def ranks_on_this_machine() -> int:
    """The processes of a distributed job on this machine (torchrun's ``LOCAL_WORLD_SIZE``;
    1 outside torchrun)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_workers() -> int:
    """A loader's workers (or DALI threads) when none are asked for: the usable cores,
    shared among the ranks of a distributed job on this machine (:func:`ranks_on_this_machine`);
    at least 1.

    Each rank took every core: 8 ranks on 64 cores started 512 DataLoader workers (or 512
    DALI threads and 512 feed processes). The cores a rank may use are divided among the
    ranks unless they already look like one rank's share (their count times the ranks fits
    the machine: a launcher bound each rank); a job-wide set (a Slurm job's cgroup, a
    container's cpuset) that every rank inherits is divided.
    """
    cores = usable_cpus()
    ranks = ranks_on_this_machine()
    if ranks > 1 and cores * ranks > (os.cpu_count() or cores):
        return max(1, cores // ranks)
    return cores


def peak_rss_bytes() -> int:
    """This process's own peak resident memory, in bytes.

    ``VmHWM`` of ``/proc/self/status`` on Linux, not ``getrusage``'s ``ru_maxrss``: a
    process started by ``fork``/``vfork`` then ``exec`` (a multiprocessing "spawn" worker)
    keeps its parent's peak in ``ru_maxrss``, so a benchmark worker started by a parent that
    had just generated a 10M-row table reported the parent's 3.3 GB as its own. Elsewhere
    ``ru_maxrss`` (KiB on Linux and BSD, bytes on macOS).
    """
    import resource
    import sys

    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def cpu_model() -> str:
    """The CPU model name."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of ``/proc/cpuinfo`` (empty where there is none)."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                if info:
                    break  # the first processor only
                continue
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


#: x86 vector extensions, widest first, as ``/proc/cpuinfo`` flags name them.
_X86_SIMD = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"))


def cpu_details() -> dict[str, Any]:
    """What tells two CPUs of one model name apart: ``{"family", "model_number", "simd"}``
    (the CPU's family and model numbers, its widest vector extension), the entries known here.

    Why: a cloud CPU's name is often only its line ("AMD EPYC"), and this project's 2-core
    boxes of that name differ from session to session: numpy's float64 ``log`` of 1M values
    took ~1 ms on one and 6-8.5 ms on another (family 25 model 1, AVX2; numpy has a SIMD
    float64 log for AVX-512 only), so a ratio with a log in it moved with the box, not
    the code.
    """
    info = _cpuinfo()
    out: dict[str, Any] = {name: int(info[key]) for key, name in (("cpu family", "family"), ("model", "model_number"))
                           if info.get(key, "").isascii() and info[key].isdigit()}
    flags = set(info.get("flags", "").split())
    simd = next((name for flag, name in _X86_SIMD if flag in flags), None)
    if simd is None and not flags:
        simd = _numpy_simd()
    if simd:
        out["simd"] = simd
    return out


def _numpy_simd() -> str | None:
    """The widest vector extension numpy found on this CPU (no ``/proc/cpuinfo``: macOS),
    or None."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found
    except ImportError:  # numpy 1.x kept it in numpy.core
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as found
        except ImportError:
            return None
    names = {"AVX512F": "AVX-512", "AVX2": "AVX2", "AVX": "AVX", "SSE42": "SSE4.2", "SVE": "SVE",
             "ASIMD": "NEON", "NEON": "NEON"}
    return next((name for key, name in names.items() if found.get(key)), None)


def cpu_words(name: str, details: dict[str, Any] | None) -> str:
    """A CPU in words from its name and :func:`cpu_details`: ``"AMD EPYC (family 25 model 1,
    AVX2)"`` (no details, as results written before they were recorded: the name)."""
    details = details or {}
    parts = [f"family {details['family']} model {details['model_number']}"] \
        if "family" in details and "model_number" in details else []
    parts += [details["simd"]] if details.get("simd") else []
    return f"{name} ({', '.join(parts)})" if parts else name


def cpu_text(meta: dict[str, Any]) -> str:
    """A result's CPU in words, from its metadata: ``"AMD EPYC (family 25 model 1, AVX2) × 2"``."""
    return f"{cpu_words(meta.get('cpu_model', '?'), meta.get('cpu_details'))} × {meta.get('cpu_count', '?')}"


def gpu_metadata() -> dict[str, Any] | None:
    """GPU name, count, driver, memory and CUDA runtime version; None without a GPU."""
    if not cuda_available():
        return None
    import torch

    info: dict[str, Any] = {
        "name": torch.cuda.get_device_name(0),
        "cuda_runtime": torch.version.cuda,
        "count": torch.cuda.device_count(),
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        driver, memory = (s.strip() for s in out.stdout.splitlines()[0].split(","))
        info.update(driver=driver, memory=memory)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        info["driver"] = None
    return info


def worker_start_method() -> str:
    """How to start worker processes here: ``"fork"`` (workers start at once, without
    importing torch again) unless DALI is loaded in this process, whose threads a forked
    worker has crashed beside; then ``"forkserver"`` (``"spawn"`` where there is none)."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and "nvidia.dali" not in sys.modules:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"
