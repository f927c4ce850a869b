"""HashBucket's vectorised path (CRC32 in numpy over Arrow text, :mod:`.crc32`) gives exactly
the buckets of :func:`stable_hash`, value by value, for every text version, on polars and
pandas; kinds whose text it cannot prove take the distinct values path."""

from __future__ import annotations

import random
import sys
import types
import zlib

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from gpufeed.gpu_transforms.tabular import HashBucket, Recipe, crc32
from gpufeed.gpu_transforms.tabular import categorical as cat
from gpufeed.gpu_transforms.tabular.categorical import HASH_TEXTS, stable_hash
from gpufeed.gpu_transforms.tabular.crc32 import arrow_text_crc32, crc32_buffers

_ALPHABET = ["a", "Z", "0", " ", "\x00", "é", "ß", "€", "中", "𝄞", "😀"]  # 1- to 4-byte UTF-8


def _texts(rng: random.Random, n: int) -> list[str]:
    def one() -> str:
        longest = rng.choice([0, 1, 2, 3, 8, 16, 40, 300, 2000])
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, longest)))

    return [one() for _ in range(n)]


def _ints(rng: random.Random, n: int, low: int, high: int) -> list[int]:
    edges = [low, low + 1, -1, 0, 1, 9, 10, 99, 100, high - 1, high]
    values = [v for v in edges if low <= v <= high]
    return values + [rng.choice([rng.randint(low, high), rng.randint(max(low, -1000), min(high, 1000))])
                     for _ in range(n - len(values))]


def _with_gaps(rng: random.Random, values: list) -> list:
    return [None if rng.random() < 0.15 else v for v in values]


def _expected(values: list, buckets: int, text: str) -> list[int]:
    return [0 if v is None else stable_hash(v, buckets, text) for v in values]


def _taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The columns that take the vectorised path, recorded as they go."""
    seen: list[str] = []
    real = cat._bucket_column

    def spy(frame, backend, column, expr, op):
        out = real(frame, backend, column, expr, op)
        if out is not None:
            seen.append(column)
        return out

    monkeypatch.setattr(cat, "_bucket_column", spy)
    return seen


# --- the kernel ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.string_view(), pa.binary()])
def test_crc32_of_arrow_text_is_zlibs(kind):
    rng = random.Random(7)
    values = _texts(rng, 1500) + ["", "x" * 70_000, "𝄞" * 5000]  # a long tail: zlib finishes it
    expected = np.array([zlib.crc32(v.encode()) for v in values], dtype=np.uint32)
    array = pa.array([v.encode() for v in values] if kind == pa.binary() else values, type=kind)
    assert (arrow_text_crc32(array) == expected).all()
    assert (arrow_text_crc32(array.slice(13, 700)) == expected[13:713]).all()  # an offset into the buffers
    chunked = pa.chunked_array([array.slice(0, 5), array.slice(5, 0), array.slice(5)])
    assert (arrow_text_crc32(chunked) == expected).all()


_RNG = random.Random(5)


@pytest.mark.parametrize("values", [
    [], [""], ["", ""], ["abc"] * 4, ["a" * 300] * 3, ["q" * 100_000] * 2, ["ab", "c", ""],
    ["z" * 256, "z" * 255, "z" * 257],
    ["".join(_RNG.choice("xyz€") for _ in range(300)) for _ in range(3000)],  # one length, past the cached rows
    ["".join(_RNG.choice("xy𝄞") for _ in range(_RNG.randint(200, 400))) for _ in range(3000)],
])
def test_crc32_of_edge_lengths(values):
    expected = np.array([zlib.crc32(v.encode()) for v in values], dtype=np.uint32)
    assert (arrow_text_crc32(pa.array(values, type=pa.string())) == expected).all()
    data = np.frombuffer("".join(values).encode() or b"\0", dtype=np.uint8)
    offsets = np.cumsum([0] + [len(v.encode()) for v in values])
    assert (crc32_buffers(offsets, data) == expected).all()


class _DeviceArray(np.ndarray):
    """A numpy array that the array-module switch takes for a cupy one (its type's module is
    ``cupy...``): the kernel's cupy branch run on the CPU. Its ``get()`` (the copy to the host)
    records what was copied."""

    __module__ = "cupy._stand_in"
    copied: list[np.ndarray] = []

    def get(self) -> np.ndarray:
        out = np.array(self)
        _DeviceArray.copied.append(out)
        return out


def _on_device(value):
    return np.asarray(value).view(_DeviceArray) if isinstance(value, np.ndarray | np.generic | list) else value


def _stand_in_cupy() -> types.ModuleType:
    """A module standing in for cupy: numpy's functions, their arrays as :class:`_DeviceArray`."""
    module = types.ModuleType("cupy")
    for name in ("diff", "zeros", "empty", "full", "sort", "partition", "take", "minimum", "argsort", "cumsum",
                 "bincount", "asarray"):
        function = getattr(np, name)
        setattr(module, name, lambda *args, _f=function, **kwargs: _on_device(_f(*args, **kwargs)))

    class Device:
        id = 0

        def __init__(self, device: int = 0) -> None:
            self.id = device

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    module.cuda = types.SimpleNamespace(Device=Device)
    return module


@pytest.fixture
def stand_in_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _stand_in_cupy())
    crc32._device_rows.cache_clear()
    _DeviceArray.copied = []
    yield
    crc32._device_rows.cache_clear()  # never leave stand-in tables where a real GPU's would be looked up


def _arrow_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow string array's offsets (from its own offset: a slice starts past 0) and bytes."""
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    return offsets, (np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8))


_LONG = "€" * 35_000  # 105 kB
_R = random.Random(37)
_ASCII = "".join(_R.choice("xyz01") for _ in range(3300))
_UNICODE = "".join(_R.choice("xy𝄞€") for _ in range(3300))
_AWKWARD = {
    "empty strings": ["", "", "a", "", "bc", ""],
    "all empty": ["", "", ""],
    "one long among short": [f"id{i}" for i in range(3000)] + [_LONG] + ["", "x"],
    "unicode": ["é", "ß€", "中文", "𝄞😀", "\x00", "a\x00b", "Z"],
    "one length": [f"{i:08d}" for i in range(2000)],
    "one length, past the cached rows": [_ASCII[o:o + 300] for o in (_R.randrange(3000) for _ in range(2000))],
    "lengths past the cached rows": [_UNICODE[o:o + _R.randint(150, 300)]  # 250 to 700 bytes
                                     for o in (_R.randrange(3000) for _ in range(20_000))],
    "mixed": _texts(random.Random(41), 2000),
    # More texts than the 4096 longest that zlib may take, all long: those past the 4096th
    # had come out as CRC 0 (the 4097th longest was taken for empty).
    "more long texts than zlib takes": [f"{i:05d}" + "x" * 1000 for i in range(5000)],
    "more long texts of many lengths": [f"{i}" + "y" * _R.randint(900, 1100) for i in range(5000)],
    "missing slots": ["a", None, "", None, "longer text", None],
    "all missing": [None, None],
}


@pytest.mark.parametrize("module", ["numpy", "cupy stand-in"])
@pytest.mark.parametrize("name", list(_AWKWARD))
def test_crc32_kernel_through_the_array_module_switch(name, module, request):
    # crc32_buffers runs one code for numpy and cupy (array_module): on numpy, and on
    # numpy arrays that the switch takes for cupy's, whole and sliced (offsets from past 0).
    values = _AWKWARD[name]
    if module != "numpy":
        request.getfixturevalue("stand_in_cupy")
    expected = np.array([zlib.crc32((v or "").encode()) for v in values], dtype=np.uint32)  # missing: no bytes
    array = pa.array(values, type=pa.string())
    for start, stop in ((0, len(values)), (1, len(values)), (len(values) // 3, len(values) - 1)):
        offsets, data = _arrow_buffers(array.slice(start, stop - start))
        if module != "numpy":
            offsets, data = offsets.view(_DeviceArray), data.view(_DeviceArray)
            assert crc32.array_module(data).__name__ == "cupy"
        got = crc32_buffers(offsets, data)
        assert type(got) is (np.ndarray if module == "numpy" else _DeviceArray)
        assert got.dtype == np.uint32
        assert np.asarray(got).tolist() == expected[start:stop].tolist(), (name, start, stop)
    if module != "numpy":
        # Bytes copied to the host: whole texts, those left to zlib alone (the long one, and
        # short ones where there are few), never the column's bytes.
        texts = {(v or "").encode() for v in values}
        copied = [c.tobytes() for c in _DeviceArray.copied if c.dtype == np.uint8]
        assert all(c in texts for c in copied)
        if name == "one long among short":
            assert copied.count(_LONG.encode()) == 3 and sum(map(len, copied)) < 3 * len(_LONG.encode()) + 1000


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_AWKWARD))
def test_crc32_kernel_on_cupy_is_zlibs(name):
    # The same inputs on a GPU, in cupy: the result stays there.
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    values = _AWKWARD[name]
    expected = np.array([zlib.crc32((v or "").encode()) for v in values], dtype=np.uint32)
    array = pa.array(values, type=pa.string())
    for start, stop in ((0, len(values)), (1, len(values)), (len(values) // 3, len(values) - 1)):
        offsets, data = _arrow_buffers(array.slice(start, stop - start))
        got = crc32_buffers(cupy.asarray(offsets), cupy.asarray(data))
        assert isinstance(got, cupy.ndarray) and got.dtype == np.uint32
        assert got.get().tolist() == expected[start:stop].tolist(), (name, start, stop)
        got = crc32_buffers(cupy.asarray(offsets.astype(np.int64)), cupy.asarray(data))  # large offsets
        assert got.get().tolist() == expected[start:stop].tolist(), (name, start, stop)


def test_array_module_is_numpy_for_anything_but_cupy():
    assert crc32.array_module(np.zeros(3)) is np
    assert crc32.array_module([1, 2]) is np
    assert crc32.array_module(pa.array([1])) is np


# --- HashBucket on polars and pandas -------------------------------------------------------

_TEXTS = list(HASH_TEXTS)
_BUCKETS = [2, 1000, 1 << 20, 2**31]


@pytest.mark.parametrize("text", _TEXTS)
def test_hash_bucket_of_strings_is_stable_hash_on_polars(text, monkeypatch):
    rng = random.Random(11)
    values = _with_gaps(rng, _texts(rng, 600))
    column = pl.Series("s", values, dtype=pl.String)
    chunked = pl.concat([column.slice(0, 100), column.slice(100, 250), column.slice(350)], rechunk=False)
    frame = pl.DataFrame({"s": column, "c": chunked, "k": column.cast(pl.Categorical),
                          "e": column.cast(pl.Enum(sorted({v for v in values if v is not None})))})
    assert frame["c"].n_chunks() == 3
    taken = _taken(monkeypatch)
    for buckets in _BUCKETS:
        out = Recipe([HashBucket(["s", "c", "k", "e"], buckets=buckets, text=text)]).fit_transform(frame)
        for name in ("s", "c", "k", "e"):
            assert out[name].dtype == pl.Int32
            assert out[name].to_list() == _expected(values, buckets, text), (name, buckets)
    assert set(taken) == {"s", "c", "k", "e"}


_PANDAS_TEXT_DTYPES = ["str", "string[python]", "string[pyarrow]", object, pd.ArrowDtype(pa.string()),
                       pd.ArrowDtype(pa.large_string()), pd.ArrowDtype(pa.string_view())]


@pytest.mark.parametrize("text", _TEXTS)
def test_hash_bucket_of_strings_is_stable_hash_on_pandas(text, monkeypatch):
    rng = random.Random(13)
    values = _with_gaps(rng, _texts(rng, 600))
    index = pd.Index(np.arange(600) * 3)  # not a range index: the output keeps it
    frame = pd.DataFrame({f"s{i}": pd.Series(values, dtype=dtype, index=index)
                          for i, dtype in enumerate(_PANDAS_TEXT_DTYPES)})
    frame["nan"] = pd.Series([np.nan if v is None else v for v in values], dtype=object, index=frame.index)
    # pandas 2 (the only pandas on Python 3.10) cannot hold text with NUL characters in a
    # categorical: building one merged "" with "\x00ab", and its text (astype(str), through
    # NumPy's fixed-width strings) drops trailing NULs. Its categorical leaves them out.
    categories = values if int(pd.__version__.split(".")[0]) >= 3 else [
        None if v is None else v.replace("\x00", "") for v in values]
    frame["cat"] = pd.Series(categories, dtype="category", index=frame.index)
    taken = _taken(monkeypatch)
    for buckets in _BUCKETS:
        out = Recipe([HashBucket(list(frame.columns), buckets=buckets, text=text)]).fit_transform(frame)
        assert (out.index == frame.index).all()
        for name in frame.columns:
            assert out[name].dtype == np.int32
            want = _expected(categories if name == "cat" else values, buckets, text)
            assert out[name].tolist() == want, (name, buckets)
    assert set(taken) == set(frame.columns)


_INT_RANGES = {f"{'u' if signed == 'u' else ''}int{bits}": ((0, 2**bits - 1) if signed == "u" else
                                                           (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
               for signed in ("i", "u") for bits in (8, 16, 32, 64)}


@pytest.mark.parametrize("text", _TEXTS)
def test_hash_bucket_of_integers_is_stable_hash_on_polars(text, monkeypatch):
    rng = random.Random(17)
    columns, expected_values = {}, {}
    for name, (low, high) in _INT_RANGES.items():
        values = _with_gaps(rng, _ints(rng, 300, low, high))
        series = pl.Series(name, values, dtype=getattr(pl, name.replace("uint", "UInt").replace("int", "Int")))
        columns[name] = pl.concat([series.slice(0, 120), series.slice(120)], rechunk=False)
        expected_values[name] = values
    frame = pl.DataFrame(columns)
    taken = _taken(monkeypatch)
    for buckets in _BUCKETS:
        out = Recipe([HashBucket(list(columns), buckets=buckets, text=text)]).fit_transform(frame)
        for name, values in expected_values.items():
            assert out[name].dtype == pl.Int32
            assert out[name].to_list() == _expected(values, buckets, text), (name, buckets)
    assert set(taken) == set(columns)


@pytest.mark.parametrize("text", _TEXTS)
def test_hash_bucket_of_integers_is_stable_hash_on_pandas(text, monkeypatch):
    rng = random.Random(19)
    frame, expected_values = {}, {}
    for name, (low, high) in _INT_RANGES.items():
        full = _ints(rng, 300, low, high)
        gaps = _with_gaps(rng, full)
        nullable = name.replace("uint", "UInt").replace("int", "Int")
        frame[name] = pd.Series(full, dtype=name)  # numpy
        frame[nullable] = pd.Series(gaps, dtype=nullable)
        frame[f"{name}[pyarrow]"] = pd.Series(gaps, dtype=f"{name}[pyarrow]")
        expected_values.update({name: full, nullable: gaps, f"{name}[pyarrow]": gaps})
    frame["categories"] = pd.Series(expected_values["int64"], dtype="category")  # hashed by value
    expected_values["categories"] = expected_values["int64"]
    frame = pd.DataFrame(frame)
    taken = _taken(monkeypatch)
    for buckets in _BUCKETS:
        out = Recipe([HashBucket(list(frame.columns), buckets=buckets, text=text)]).fit_transform(frame)
        for name, values in expected_values.items():
            assert out[name].dtype == np.int32
            assert out[name].tolist() == _expected(values, buckets, text), (name, buckets)
    assert set(taken) == set(frame.columns)


def test_hash_bucket_vectorised_on_a_lazy_polars_frame(monkeypatch):
    rng = random.Random(23)
    values = _with_gaps(rng, _texts(rng, 200))
    ids = _with_gaps(rng, _ints(rng, 200, -(2**63), 2**63 - 1))
    frame = pl.DataFrame({"s": pl.Series(values, dtype=pl.String).cast(pl.Categorical), "i": ids})
    taken = _taken(monkeypatch)
    out = HashBucket(["s", "i"], buckets=97).transform(cat.wrap(frame.lazy()), "polars")
    out = out.collect().to_native()
    assert out["s"].to_list() == _expected(values, 97, "canonical-v2")
    assert out["i"].to_list() == _expected(ids, 97, "canonical-v2")
    assert out["s"].dtype == out["i"].dtype == pl.Int32
    assert set(taken) == {"s", "i"}


def test_hash_bucket_keeps_other_kinds_on_the_distinct_values_path(monkeypatch):
    # Their canonical text is not their plain text: booleans ("True"), floats (130.0 as "130"),
    # mixed objects, times; polars' Int128 and binary are left as they were too.
    taken = _taken(monkeypatch)
    pdf = pd.DataFrame({"b": [True, False, None], "f": [130.0, 0.5, None], "m": ["a", 3, None],
                        "t": pd.to_datetime(["2024-01-01", None, "2024-01-02 10:00"], format="ISO8601"),
                        "nat": pd.Series(["a", pd.NaT, "b"], dtype=object)})
    out = Recipe([HashBucket(list(pdf.columns), buckets=50)]).fit_transform(pdf)
    for name in pdf.columns:
        assert out[name].tolist() == [0 if cat.is_missing(v) else stable_hash(v, 50) for v in pdf[name]], name
    plf = pl.DataFrame({"b": [True, None], "x": pl.Series([2**100, None], dtype=pl.Int128),
                        "y": [b"a", None]})
    out = Recipe([HashBucket(["b", "x", "y"], buckets=50)]).fit_transform(plf)
    assert out["b"].to_list() == [stable_hash(True, 50), 0]
    assert out["x"].to_list() == [stable_hash(2**100, 50), 0]
    assert out["y"].to_list() == [stable_hash(b"a", 50), 0]
    assert taken == []


def test_hash_bucket_of_text_that_is_no_utf8_still_fails_as_before():
    # A lone surrogate cannot be encoded: the distinct values path raises, as it did.
    with pytest.raises(UnicodeEncodeError):
        Recipe([HashBucket(["s"], buckets=8)]).fit_transform(pd.DataFrame({"s": ["a", "\ud800"]}, dtype=object))


def test_hash_bucket_vectorised_on_dask_partitions():
    dd = pytest.importorskip("dask.dataframe")
    rng = random.Random(29)
    values = _with_gaps(rng, _texts(rng, 120))
    ids = _ints(rng, 120, 0, 2**64 - 1)
    pdf = pd.DataFrame({"s": pd.Series(values, dtype="string[pyarrow]"), "u": pd.Series(ids, dtype="uint64")})
    out = Recipe([HashBucket(["s", "u"], buckets=1000)]).fit_transform(dd.from_pandas(pdf, npartitions=3)).compute()
    assert out["s"].tolist() == _expected(values, 1000, "canonical-v2")
    assert out["u"].tolist() == _expected(ids, 1000, "canonical-v2")
