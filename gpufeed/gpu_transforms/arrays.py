"""Zero-copy moves between torch, numpy, cupy and cuDF, and the array namespace ``xp``.

Data changes framework without moving: DLPack (``__dlpack__``) and the CUDA array
interface hand over the same memory. A move that would need a copy (host to device or
back) is refused unless ``allow_copy=True``, so a hidden transfer never hides in a hot
loop. cupy and cuDF are recognised by their type's module name and imported only when
the data is already theirs or the device is CUDA, so a CPU-only workflow never loads them.

Example:
    >>> import numpy as np
    >>> a = np.arange(6, dtype=np.float32)
    >>> t = to_torch(a)          # shares memory with ``a``
    >>> t[0] = 42.0
    >>> float(a[0])
    42.0
    >>> xp(t).__name__           # numpy for CPU data, cupy for CUDA data
    'numpy'
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType
from typing import Any

import numpy as np
import torch

from gpufeed.backends import choose_array_module

#: DLPack's device type of host memory (``kDLCPU``).
_DLPACK_CPU = 1

def constant(values: tuple, device: torch.device | str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A small constant tensor (mean, weights, corner points) on ``device``, made once per
    ``(values, device, dtype)`` and reused; never change it in place.

    Why: ``torch.tensor(values, device="cuda")`` (or ``x.new_tensor``, ``t.to("cuda")``)
    copies from pageable host memory and waits for the GPU's queue to drain, so a batch
    that made its constants again synchronised with the host several times, and the
    host could not queue the next batch's work ahead of the GPU.

    Args:
        values: the numbers, as a (nested) tuple, so they can key the cache (a list is
            taken as the tuple of its items).
        device: where the tensor lives.
        dtype: its dtype.

    Raises:
        TypeError: ``values`` holds something that cannot key the cache (an array, a tensor).
    """
    key = _as_tuple(values)
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"constant: values must be numbers in (nested) tuples or lists, got {values!r}") from None
    return _constant(key, str(torch.device(device)), dtype)


def _as_tuple(values: Any) -> Any:
    """Lists (nested too) as tuples, so that ``constant([0.5, 0.5])`` keys the cache."""
    return tuple(_as_tuple(v) for v in values) if isinstance(values, list | tuple) else values


@functools.lru_cache(maxsize=512)
def _constant(values: tuple, device: str, dtype: torch.dtype) -> torch.Tensor:
    # Never an inference tensor, whatever mode the first caller ran in: one made under
    # torch.inference_mode() (a validation pass before training, Lightning's sanity check)
    # could not be saved for backward by every later training step that reused it.
    with torch.inference_mode(False):
        return torch.tensor(values, dtype=dtype, device=device)


def _family(obj: Any) -> str:
    """'torch' | 'numpy' | 'cupy' | 'cudf' | 'other', without importing cupy or cuDF."""
    if isinstance(obj, torch.Tensor):
        return "torch"
    if isinstance(obj, np.ndarray):
        return "numpy"
    root = type(obj).__module__.split(".", 1)[0]
    return root if root in ("cupy", "cudf") else "other"


def _cupy() -> ModuleType:
    try:
        import cupy  # noqa: PLC0415 - imported only for CUDA data
    except ImportError:
        from gpufeed.machine import install_hint

        raise RuntimeError(f"CUDA arrays need cupy: {install_hint('cuda13')}") from None
    return cupy


def _cross(what: str, allow_copy: bool) -> None:
    if not allow_copy:
        raise ValueError(f"{what} needs a copy between host and device; pass allow_copy=True to allow it")


def xp(obj: Any = None, *, device: torch.device | str | None = None) -> ModuleType:
    """The array namespace for data or a device: numpy on CPU, cupy on CUDA.

    Args:
        obj: an array or tensor whose home decides (a CUDA tensor or cupy array -> cupy).
        device: decide from a device instead ("cpu", "cuda", torch.device).

    Returns:
        The ``numpy`` or ``cupy`` module; cupy is imported only when CUDA is chosen.

    Raises:
        RuntimeError: CUDA data but cupy is not installed.
    """
    if obj is not None and device is not None:
        raise TypeError("pass obj or device, not both")
    fam = _family(obj) if obj is not None else None
    if fam in ("cupy", "cudf"):
        return _cupy()
    if fam == "torch":
        device = obj.device
    dev = torch.device(device if device is not None else "cpu")
    return _cupy() if choose_array_module(dev).name == "cupy" else np


def device_of(obj: Any) -> torch.device:
    """The torch device an array, tensor or cuDF object lives on.

    cuDF does not say which GPU holds a frame: it is taken to be cupy's current device,
    which is right unless the frame was made under another ``cupy.cuda.Device`` context.
    """
    fam = _family(obj)
    if fam == "torch":
        return obj.device
    if fam == "numpy" or isinstance(obj, np.generic):  # a numpy scalar lives on the host too
        return torch.device("cpu")
    if fam == "cupy":
        return torch.device("cuda", obj.device.id)
    if fam == "cudf":
        return torch.device("cuda", _cupy().cuda.Device().id)
    if hasattr(obj, "__dlpack_device__"):
        kind, index = obj.__dlpack_device__()
        return torch.device("cpu") if int(kind) in (1, 3) else torch.device("cuda", index)
    raise TypeError(f"cannot tell where a {type(obj).__name__} lives")


def _numpy_typed(obj: Any) -> Any:
    """A cuDF Series or DataFrame with its pandas nullable or Arrow number dtypes (``Int64``,
    ``Float64``, ``boolean``, ``int32[pyarrow]``, which cuDF keeps on a column made from
    pandas) as the numpy dtypes of the same values (a cast on the GPU, no host copy); ``obj``
    itself when every dtype is numpy's already.

    Why: cuDF's ``to_cupy`` hands such a dtype to cupy (``cupy.empty(dtype=Int64Dtype())``,
    ``cupy.can_cast``), which takes numpy dtypes only and raised a TypeError.
    """
    if hasattr(obj, "columns"):
        casts = {name: numpy for name, t in obj.dtypes.items() if (numpy := _numpy_number(t)) is not None}
        return obj.astype(casts) if casts else obj
    numpy = _numpy_number(obj.dtype)
    return obj if numpy is None else obj.astype(numpy)


def _numpy_number(dtype: Any) -> np.dtype | None:
    """The numpy dtype of a pandas nullable or Arrow number or boolean dtype; None for a
    numpy dtype (nothing to cast) or any other (text, categories: left to cuDF's errors)."""
    if isinstance(dtype, np.dtype):
        return None
    numpy = getattr(dtype, "numpy_dtype", None)
    return numpy if isinstance(numpy, np.dtype) and numpy.kind in "biuf" else None


def _cudf_to_cupy(obj: Any, dtype: str | None = None) -> Any:
    # A numeric column without nulls is one contiguous device buffer: to_cupy() views it.
    if hasattr(obj, "columns"):  # DataFrame: one 2-D array, which needs one dtype
        # As for a column: cuDF's to_cupy made a column's nulls NaN (an integer column
        # float64) without a word, or raised for booleans.
        gaps = {name: int(obj[name].null_count) for name in obj.columns if obj[name].null_count}
        if gaps:
            raise ValueError(f"cuDF column(s) {list(gaps)} have missing values ({', '.join(map(str, gaps.values()))}), "
                             "and a column with missing values has no zero-copy array view; fill them first")
        # Cast after, not by to_cupy(dtype=): in cuDF 25.10-26.04 its path for columns of one
        # dtype without nulls copies their bytes into a matrix of the asked dtype without a
        # cast (int32 read as float32 bits, float64 refused as too large; fixed in 26.06).
        matrix = _numpy_typed(obj).to_cupy()
        return matrix if dtype is None else matrix.astype(dtype, order="C", copy=False)
    if obj.null_count:
        raise ValueError(f"cuDF column {obj.name!r} has {int(obj.null_count)} missing value(s), and a column with "
                         "missing values has no zero-copy array view; fill them first")
    return _numpy_typed(obj).to_cupy(dtype=dtype)


def cudf_to_torch(obj: Any, dtype: str | None = None) -> torch.Tensor:
    """A cuDF Series or DataFrame as a tensor on its GPU: cuDF -> cupy -> torch by DLPack.

    The data never leaves the device; the tensor shares cupy's memory. A DataFrame becomes
    one 2-D matrix of ``dtype`` (e.g. ``"float32"``, cast on the GPU; default: the columns'
    common type).
    """
    return torch.from_dlpack(_cudf_to_cupy(obj, dtype))


def to_torch(obj: Any, *, device: torch.device | str | None = None, allow_copy: bool = False) -> torch.Tensor:
    """A torch tensor sharing memory with ``obj`` (numpy, cupy, cuDF or any DLPack producer).

    Args:
        obj: the data.
        device: where the tensor must be; a different device than the data's is a copy.
        allow_copy: allow that copy (host <-> device) instead of raising.

    Returns:
        A tensor viewing the same memory when no device change is asked for.

    A read-only numpy array (``np.frombuffer(bytes)``, ``np.load(..., mmap_mode="r")``) is
    shared as well, with a warning: torch has no read-only tensors, so the tensor must
    not be written to (writing changes memory numpy protects, or crashes on a read-only
    mapping). It is not copied, because copying a read-only memory-mapped data set would
    silently read it all into RAM; ``to_torch(a).clone()`` gives a writable copy.

    Example:
        >>> to_torch(np.zeros((2, 3), np.float32)).shape
        torch.Size([2, 3])
    """
    if isinstance(obj, np.generic):  # a numpy scalar: a 0-d array holds it as well
        obj = np.asarray(obj)
    fam = _family(obj)
    if fam == "torch":
        t = obj
    elif fam == "numpy":
        _check_numpy_view(obj)
        if not obj.flags.writeable:
            warnings.warn("to_torch: the numpy array is read-only, and torch has no read-only tensors: the tensor "
                          "shares its memory, so do not write to it (that would change memory numpy protects, or "
                          "crash on a read-only mapping); use to_torch(a).clone() for a writable copy",
                          UserWarning, stacklevel=2)
            with warnings.catch_warnings():  # torch's own, less specific warning of the same thing
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                t = torch.from_numpy(obj)
        else:
            t = torch.from_numpy(obj)
    elif fam == "cudf":
        t = cudf_to_torch(obj)
    elif fam == "cupy" or hasattr(obj, "__dlpack__"):
        t = torch.from_dlpack(obj)
    else:
        raise TypeError(f"to_torch takes torch, numpy, cupy, cuDF or DLPack data, got {type(obj).__name__}")
    if device is not None and not _same_device(torch.device(device), t.device):
        _cross(f"moving a tensor from {t.device} to {device}", allow_copy)
        t = t.to(device)
    return t


def _check_numpy_view(obj: np.ndarray) -> None:
    """Refuse, naming ``obj`` and the fix, a numpy array torch cannot view without a copy
    (torch's own errors named no argument, and a masked array's mask was dropped silently)."""
    if isinstance(obj, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(obj))
        if masked:
            raise ValueError(f"to_torch: obj is a numpy masked array with {masked} masked value(s), and a tensor has "
                             "no mask (they would become ordinary values): obj.filled(value) first, or pass the "
                             "mask on as a tensor of its own (to_torch(np.ma.getmaskarray(obj)))")
    kind = obj.dtype.kind
    if kind in "OUSVMm" or obj.dtype.fields is not None:
        raise TypeError(f"to_torch: obj has numpy dtype {obj.dtype}, which torch has no dtype for (torch takes "
                        "bool, integers, float16/32/64 and complex64/128); convert it first (a copy)")
    if not obj.dtype.isnative:
        raise ValueError(f"to_torch: obj is of non-native byte order ({obj.dtype.str}), which torch cannot view; "
                         "obj.astype(obj.dtype.newbyteorder('=')) makes a native copy")
    if any(st < 0 for st in obj.strides):
        raise ValueError(f"to_torch: obj has negative strides {obj.strides} (a reversed view such as a[::-1]), "
                         "which torch cannot view; np.ascontiguousarray(obj) makes a copy it can, or reverse "
                         "the tensor instead (torch.flip)")


def _same_device(wanted: torch.device, have: torch.device) -> bool:
    """Whether data on ``have`` is on ``wanted``; ``"cuda"`` without an index means the
    current GPU (``torch.device("cuda") != torch.device("cuda:0")`` in torch). The host is
    one device whatever its index (``"cpu:0"`` is where every CPU tensor lives)."""
    if wanted.type != have.type:
        return False
    if wanted.type == "cpu":
        return True
    if wanted.type == "cuda" and wanted.index is None:
        return have.index == torch.cuda.current_device()
    return wanted.index is None or wanted.index == have.index


@functools.lru_cache(maxsize=64)
def _numpy_has(dtype: torch.dtype) -> bool:
    """Whether torch can hand a tensor of ``dtype`` to numpy (bfloat16, float8: no)."""
    try:
        torch.empty(0, dtype=dtype).numpy()
    except TypeError:
        return False
    return True


def to_numpy(obj: Any, *, allow_copy: bool = False) -> np.ndarray:
    """A numpy array sharing memory with host data; device data needs ``allow_copy``.

    Raises:
        TypeError: ``obj`` is none of torch, numpy, cupy, cuDF or DLPack data (a pandas or
            polars Series has its own ``.to_numpy()``), or a tensor of a dtype numpy lacks
            (bfloat16, float8: convert it first, e.g. ``t.float()``; the conversion is a
            copy, which this function never makes behind your back).
        ValueError: a device tensor without ``allow_copy``, or a meta tensor (no data).
    """
    if isinstance(obj, np.generic):
        return np.asarray(obj)
    fam = _family(obj)
    if fam == "numpy":
        return obj
    if fam == "torch":
        if obj.device.type == "meta":
            raise ValueError("a meta tensor has no data to convert to numpy (it only records shape and dtype)")
        if not _numpy_has(obj.dtype):
            raise TypeError(f"numpy has no {str(obj.dtype).replace('torch.', '')} dtype, so a tensor of it has no numpy "
                            "view; convert it first, e.g. to_numpy(t.float()) (a copy in float32), or view its raw bits as "
                            "an integer dtype of its size (t.view(torch.int16) for bfloat16)")
        if obj.device.type != "cpu":
            _cross(f"a {obj.device.type.upper() if obj.device.type == 'cuda' else obj.device.type} tensor to numpy",
                   allow_copy)
            return obj.detach().cpu().numpy()
        return obj.detach().numpy()
    if fam in ("cupy", "cudf"):
        _cross(f"{fam} data to numpy", allow_copy)
        arr = _cudf_to_cupy(obj) if fam == "cudf" else obj
        return arr.get()
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"to_numpy takes torch, numpy, cupy, cuDF or DLPack data, got {type(obj).__name__}"
                        " (a pandas or polars Series: its own .to_numpy())")
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _DLPACK_CPU
    if device_type != _DLPACK_CPU:
        # np.from_dlpack reads host memory only: device data (JAX on a GPU, a CUDA array of
        # another library) goes through torch's DLPack reader, which takes CUDA memory.
        _cross("DLPack data on a device to numpy", allow_copy)
        return torch.from_dlpack(obj).cpu().numpy()
    return np.from_dlpack(obj)


def to_cupy(obj: Any, *, allow_copy: bool = False) -> Any:
    """A cupy array sharing memory with CUDA data; host data needs ``allow_copy``."""
    fam = _family(obj)
    if fam == "cupy":
        return obj
    if fam == "cudf":
        return _cudf_to_cupy(obj)
    if fam == "torch" and obj.device.type == "cuda":
        return _cupy().from_dlpack(obj.detach())
    if fam in ("numpy", "torch"):
        _cross("host data to cupy", allow_copy)
        return _cupy().asarray(obj.detach().numpy() if fam == "torch" else obj)
    return _cupy().from_dlpack(obj)


def to_cudf(obj: Any, *, name: str | None = None) -> Any:
    """A cuDF Series (1-D) or DataFrame (2-D) over CUDA data, via cupy.

    The device data is handed over through the CUDA array interface without a host round
    trip; whether cuDF then shares or copies the buffer is up to cuDF (it owns its columns).
    The reverse direction (:func:`to_torch`, :func:`to_cupy` on a column) is zero-copy.
    """
    import cudf  # noqa: PLC0415 - GPU-only path

    arr = to_cupy(obj)
    if arr.ndim == 1:
        return cudf.Series(arr, name=name)
    if arr.ndim == 2:
        return cudf.DataFrame(arr)
    raise ValueError(f"to_cudf takes 1-D or 2-D data, got {arr.ndim}-D")

