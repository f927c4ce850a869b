"""Zero-copy array moves and the ``xp`` namespace choice; CPU-only paths never load cupy."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from gpufeed.gpu_transforms.arrays import device_of, to_cupy, to_numpy, to_torch, xp


def test_numpy_and_torch_share_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = to_torch(a)
    t[0, 0] = 99
    assert a[0, 0] == 99 and t.shape == (3, 4) and t.dtype == torch.float32
    back = to_numpy(t)
    back[1, 1] = -1
    assert t[1, 1] == -1 and np.shares_memory(a, back)


def test_to_torch_takes_any_dlpack_producer():
    class Producer:  # a foreign array that only speaks DLPack
        def __init__(self, arr: np.ndarray) -> None:
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a = np.ones(5, dtype=np.int64)
    t = to_torch(Producer(a))
    t += 1
    assert (a == 2).all()
    assert device_of(Producer(a)) == torch.device("cpu")


def test_to_numpy_of_a_dlpack_producer_on_a_device_needs_allow_copy_and_then_copies():
    """``np.from_dlpack`` reads host memory only: device data of a library the kit does not
    know (JAX on a GPU) failed inside numpy, although ``allow_copy=True`` promises a copy.
    It now needs ``allow_copy`` and copies through torch's DLPack reader (here a producer
    that says it lives on a device other than the host; torch then copies to the host)."""
    from gpufeed.gpu_transforms.arrays import to_numpy

    class OnDevice:
        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor

        def __dlpack__(self, **kw):
            return self.tensor.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA, as a GPU array reports it

    with pytest.raises(ValueError, match="DLPack data on a device to numpy needs a copy"):
        to_numpy(OnDevice(torch.arange(3)))
    a = np.arange(4.0)

    class OnHost(OnDevice):
        def __dlpack_device__(self):
            return (1, 0)

    assert np.shares_memory(to_numpy(OnHost(torch.from_numpy(a))), a)  # host data: no copy, no flag


def test_xp_is_numpy_on_cpu():
    assert xp(np.zeros(2)) is np
    assert xp(torch.zeros(2)) is np
    assert xp(device="cpu") is np
    with pytest.raises(TypeError, match="not both"):
        xp(torch.zeros(2), device="cpu")


def test_device_changes_need_allow_copy():
    t = torch.zeros(3)
    with pytest.raises(ValueError, match="allow_copy"):
        to_torch(t, device="meta")
    assert to_torch(t, device="meta", allow_copy=True).device.type == "meta"
    with pytest.raises(ValueError, match="allow_copy"):
        to_cupy(np.zeros(3))


def test_unknown_objects_are_refused():
    import pandas as pd
    import polars as pl

    with pytest.raises(TypeError, match="to_torch takes"):
        to_torch([1, 2, 3])
    with pytest.raises(TypeError, match="cannot tell"):
        device_of("x")
    for obj in ([1, 2], pd.Series([1.0, 2.0]), pl.Series([1.0, 2.0])):  # numpy's AttributeError named nothing
        with pytest.raises(TypeError, match=r"to_numpy takes .* its own \.to_numpy\(\)"):
            to_numpy(obj)


def test_numpy_scalars_are_taken_as_zero_d_arrays():
    assert to_torch(np.float32(3.0)).item() == 3.0 and to_torch(np.float32(3.0)).dtype == torch.float32
    assert to_numpy(np.int64(7)).shape == () and int(to_numpy(np.int64(7))) == 7


def test_cpu_workflow_never_imports_cupy_or_cudf():
    code = textwrap.dedent("""
        import sys
        import numpy as np, torch
        from gpufeed.gpu_transforms.arrays import to_torch, to_numpy, xp
        from gpufeed.gpu_transforms.augment import GpuAugment, RandomResizedCrop, ColorJitter, MixUp
        x = to_torch(np.random.randint(0, 256, (4, 3, 32, 32), dtype=np.uint8))
        stage = GpuAugment([RandomResizedCrop(24), ColorJitter(0.2, 0.2, 0.2, 0.1), MixUp(3)], seed=0)
        out, y = stage(x, torch.tensor([0, 1, 2, 0]))
        assert xp(out) is np and to_numpy(out).shape == (4, 3, 24, 24)
        bad = [m for m in ("cupy", "cudf", "nvidia.dali") if m in sys.modules]
        print("LOADED", bad)
        sys.exit(1 if bad else 0)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.gpu
def test_cupy_and_torch_share_cuda_memory():
    cp = pytest.importorskip("cupy")
    t = torch.arange(6, device="cuda", dtype=torch.float32)
    c = to_cupy(t)
    c[0] = 42
    assert float(t[0]) == 42 and xp(t) is cp and xp(c) is cp
    back = to_torch(c)
    assert back.data_ptr() == t.data_ptr()
    assert device_of(c) == t.device
    with pytest.raises(ValueError, match="allow_copy"):
        to_numpy(c)
    assert to_torch(t, device="cuda").data_ptr() == t.data_ptr()  # "cuda" is the current GPU: no copy, no refusal


def test_cuda_and_auto_name_the_current_gpu_by_its_number(monkeypatch):
    # Under torchrun each rank calls torch.cuda.set_device(local_rank); a bare "cuda" read
    # as GPU 0 put every rank's DALI decoding on the first GPU.
    from gpufeed import backends

    monkeypatch.setattr(backends, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert backends.resolve_device("cuda") == torch.device("cuda", 3)
    assert backends.resolve_device("auto") == torch.device("cuda", 3)
    assert backends.resolve_device("cuda:1") == torch.device("cuda", 1)
    assert backends.resolve_device("cpu") == torch.device("cpu")


@pytest.mark.gpu
def test_cudf_columns_come_over_without_copy():
    cudf = pytest.importorskip("cudf")
    from gpufeed.gpu_transforms.arrays import to_cudf

    s = cudf.Series(np.arange(5, dtype=np.float32))
    t = to_torch(s)
    assert t.device.type == "cuda" and t.tolist() == [0, 1, 2, 3, 4]
    assert to_cupy(s).data.ptr == t.data_ptr()
    back = to_cudf(t * 2, name="x")
    assert back.name == "x" and back.to_numpy().tolist() == [0, 2, 4, 6, 8]
    with pytest.raises(ValueError, match="missing value"):  # the message says "missing value(s)"
        to_torch(cudf.Series([1.0, None]))


def test_pandas_nullable_number_dtypes_become_numpy_before_cupy():
    # cuDF keeps pandas' Int64/boolean/Arrow dtypes on a column made from pandas, and its
    # to_cupy handed them to cupy, which takes numpy dtypes only: the same check on pandas.
    import pyarrow as pa

    from gpufeed.gpu_transforms.arrays import _numpy_typed

    df = pd.DataFrame({"a": pd.array([1, 2], dtype="Int64"), "b": [1.0, 2.0],
                       "c": pd.array([True, False], dtype="boolean"),
                       "p": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int32())), "s": pd.array(["x", "y"], dtype="string")})
    typed = _numpy_typed(df)
    assert typed.dtypes[["a", "b", "c", "p"]].tolist() == [np.int64, np.float64, np.bool_, np.int32]
    assert typed["s"].dtype == df["s"].dtype  # text is left to cuDF's own error
    assert _numpy_typed(df["a"]).dtype == np.int64
    plain = df[["b"]]
    assert _numpy_typed(plain) is plain and _numpy_typed(plain["b"]).dtype == np.float64


@pytest.mark.gpu
def test_cudf_frames_of_pandas_nullable_dtypes_and_gaps():
    cudf = pytest.importorskip("cudf")

    gdf = cudf.from_pandas(pd.DataFrame({"a": pd.array([1, 2, 3], dtype="Int64"), "b": [0.5, 1.5, 2.5]}))
    t = to_torch(gdf)
    assert t.device.type == "cuda" and t.cpu().numpy().tolist() == [[1.0, 0.5], [2.0, 1.5], [3.0, 2.5]]
    assert to_torch(gdf["a"]).cpu().numpy().tolist() == [1, 2, 3]
    ints = cudf.from_pandas(pd.DataFrame({"a": pd.array([1, 2], dtype="Int64"), "b": pd.array([3, 4], dtype="Int64")}))
    assert to_torch(ints).cpu().numpy().tolist() == [[1, 3], [2, 4]]
    # a gap in a frame is refused as in a column (cuDF made it NaN, an int column float64)
    with pytest.raises(ValueError, match=r"\['a'\] have missing values \(1\)"):
        to_torch(cudf.DataFrame({"a": [1, None], "b": [1.0, 2.0]}))


def test_device_constants_are_made_once_and_reused():
    from gpufeed.gpu_transforms.arrays import constant

    a = constant((0.5, 1.5), "cpu")
    assert a is constant((0.5, 1.5), torch.device("cpu"))  # no new tensor (on a GPU: no copy, no sync)
    assert a.tolist() == [0.5, 1.5] and a.dtype == torch.float32
    assert constant((0.5, 1.5), "cpu", torch.float64).dtype == torch.float64
    assert constant(((0, 1), (2, 3)), "cpu", torch.int64).shape == (2, 2)


def test_constants_first_made_under_inference_mode_serve_training_later():
    from gpufeed.gpu_transforms.augment.photometric import Normalize

    norm = Normalize(mean=(0.123, 0.456, 0.789), std=(0.31, 0.32, 0.33))  # values no other test uses
    with torch.inference_mode():  # a validation pass (or Lightning's sanity check) before training
        norm.apply(torch.rand(2, 3, 4, 4), {})
    x = torch.rand(2, 3, 4, 4, requires_grad=True)
    norm.apply(x, {}).pow(2).sum().backward()  # an inference tensor cannot be saved for backward
    assert x.grad is not None and x.grad.shape == x.shape


def test_tensors_numpy_cannot_hold_get_errors_that_say_why_and_what_to_do():
    """A meta tensor was called "a CUDA tensor"; bfloat16 failed with torch's bare
    "Got unsupported ScalarType BFloat16"."""
    for kw in ({}, {"allow_copy": True}):
        with pytest.raises(ValueError, match="meta tensor has no data"):
            to_numpy(torch.zeros(3, device="meta"), **kw)
    with pytest.raises(TypeError, match=r"numpy has no bfloat16 dtype.*t\.float\(\)"):
        to_numpy(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="numpy has no float8_e4m3fn"):
        to_numpy(torch.zeros(3, dtype=torch.float8_e4m3fn))
    assert to_numpy(torch.zeros(3, dtype=torch.bfloat16).float()).dtype == np.float32  # the hint works


def test_a_read_only_array_is_shared_with_a_warning_that_names_the_risk():
    """Writing through the tensor changed an immutable bytes object with only torch's
    generic warning; it is still shared (no hidden copy of a read-only memmap), but the
    warning now points at the caller and says how to get a writable copy."""
    data = bytes(4)
    ro = np.frombuffer(data, dtype=np.uint8)
    with pytest.warns(UserWarning, match=r"read-only.*do not write to it.*\.clone\(\)") as record:
        t = to_torch(ro)
    assert len(record) == 1 and record[0].filename == __file__  # ours, at the caller; torch's silenced
    assert np.shares_memory(to_numpy(t), ro)
    writable = to_torch(ro.copy())
    writable[0] = 7
    assert data == bytes(4)


def test_cpu_with_an_index_is_the_host_and_needs_no_copy():
    a = np.arange(6, dtype=np.float32)
    for device in ("cpu:0", torch.device("cpu", 0)):  # was "needs a copy between host and device"
        t = to_torch(a, device=device)
        assert t.data_ptr() == a.ctypes.data and np.shares_memory(a, to_numpy(t))


def test_numpy_arrays_torch_cannot_view_are_refused_naming_the_argument_and_the_fix():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match=r"to_torch: obj has negative strides .*np\.ascontiguousarray"):
        to_torch(a[::-1])
    with pytest.raises(ValueError, match=r"to_torch: obj is of non-native byte order \(>i4\)"):
        to_torch(np.arange(3, dtype=">i4"))
    for bad in (np.array([1, "a"], dtype=object), np.array(["2024-01-01"], dtype="datetime64[ns]"),
                np.zeros(2, dtype=[("a", "f4"), ("b", "i4")])):
        with pytest.raises(TypeError, match=rf"to_torch: obj has numpy dtype {re.escape(str(bad.dtype))}"):
            to_torch(bad)
    # Views torch can take stay shared: strided, transposed, Fortran order.
    for view in (a[:, ::2], a.T, np.asfortranarray(a)):
        t = to_torch(view)
        assert np.shares_memory(view, t.numpy()) and t.stride() == tuple(s // 4 for s in view.strides)


def test_a_masked_array_with_masked_values_is_refused_instead_of_unmasking_them():
    with pytest.raises(ValueError, match=r"masked array with 1 masked value\(s\).*filled"):
        to_torch(np.ma.array([1.0, -999.0], mask=[False, True]))  # was: tensor([1., -999.])
    clean = np.ma.array([1.0, 2.0], mask=[False, False])
    assert to_torch(clean).tolist() == [1.0, 2.0]


def test_constants_take_lists_and_numpy_scalars_live_on_the_host():
    from gpufeed.gpu_transforms.arrays import constant

    assert constant([0.25, 0.75], "cpu") is constant((0.25, 0.75), "cpu")  # was: unhashable type: 'list'
    assert constant([[0, 1], [2, 3]], "cpu", torch.int64).shape == (2, 2)
    with pytest.raises(TypeError, match="constant: values must be numbers"):
        constant((np.zeros(2),), "cpu")
    assert device_of(np.float32(1.0)) == torch.device("cpu")  # was: cannot tell where a float32 lives
