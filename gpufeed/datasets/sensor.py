"""A sensor-like table: station, region, timestamp and ~95 integer/float readings.

Real sensor exports are wide tables stored as int64/float64 although the values come from
narrow sources: flags, 8- and 12-bit ADC counts, counters, and floats quantised by the
sensor (a DS18B20 thermometer reports multiples of 1/16 degC), which survive float32
exactly. A few derived columns (ratios) really need float64. That mix is what makes
lossless downcasting pay off, so the generator reproduces it; float readings have some
missing values.

Rows are built in fixed blocks, each seeded from ``(seed, block index)``, so a table
generated in one go equals the same table written chunk by chunk (sizes beyond RAM).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpufeed.datasets.chunked import cached_file, iter_block_chunks, write_chunks

#: Bump when the generated values change, so cached tables are rebuilt.
GENERATOR_VERSION = 1
#: Rows per seeded block; chunked writing rounds chunks to a multiple of it.
BLOCK_ROWS = 65_536
REGIONS = ("north", "south", "east", "west", "central", "coastal")
#: (kind, low, high, step) of each feature kind; ``step`` None means an integer kind.
FEATURE_KINDS: dict[str, tuple[str, float, float, float | None]] = {
    "flag": ("int", 0, 1, None),
    "code": ("int", 0, 200, None),
    "adc": ("int", 0, 4095, None),
    "count": ("int", 0, 60_000, None),
    "total": ("int", 0, 3_000_000, None),
    "delta": ("int", -100, 100, None),
    "temp": ("float", -40.0, 60.0, 1 / 16),
    "pressure": ("float", 950.0, 1050.0, 1 / 64),
    "humidity": ("float", 0.0, 100.0, 1 / 8),
    "volt": ("float", 0.0, 5.0, 1 / 1024),
    "ratio": ("float", 0.0, 1.0, None),  # derived: full float64 precision
}
_INT_KINDS = ("flag", "code", "adc", "count", "total", "delta")
_FLOAT_KINDS = ("temp", "pressure", "humidity", "volt")


def sensor_schema(n_features: int = 95) -> list[tuple[str, str]]:
    """``(column name, kind)`` of each feature column, e.g. ``("temp_55", "temp")``.

    Args:
        n_features: number of feature columns (the kinds repeat in the default proportions).

    Returns:
        One pair per feature, in column order.

    Example:
        >>> sensor_schema(3)
        [('flag_00', 'flag'), ('code_01', 'code'), ('temp_02', 'temp')]
    """
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    # The default 95 are 55 integer, 32 quantised float and 8 float64 columns; smaller or
    # larger tables keep those shares.
    n_int = round(n_features * 55 / 95)
    n_float = min(n_features - n_int, round(n_features * 32 / 95))
    kinds = ([_INT_KINDS[i % len(_INT_KINDS)] for i in range(n_int)]
             + [_FLOAT_KINDS[i % len(_FLOAT_KINDS)] for i in range(n_float)]
             + ["ratio"] * (n_features - n_int - n_float))
    return [(f"{kind}_{i:02d}", kind) for i, kind in enumerate(kinds)]


def _block(seed: int, index: int, n_features: int, n_stations: int, missing_rate: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, index])
    rows = np.arange(index * BLOCK_ROWS, (index + 1) * BLOCK_ROWS, dtype=np.int64)
    station = rows % n_stations + 1
    out: dict[str, np.ndarray] = {
        "station_id": station,
        "region": np.asarray(REGIONS, dtype=object)[station % len(REGIONS)],
        "timestamp": np.datetime64("2024-01-01T00:00:00", "ns") + (rows // n_stations) * np.timedelta64(60, "s"),
    }
    for name, kind in sensor_schema(n_features):
        dtype, low, high, step = FEATURE_KINDS[kind]
        if dtype == "int":
            values = rng.integers(int(low), int(high) + 1, BLOCK_ROWS, dtype=np.int64)
        else:
            values = rng.uniform(low, high, BLOCK_ROWS)
            if step is not None:
                values = np.round(values / step) * step
            if missing_rate > 0:
                values[rng.random(BLOCK_ROWS) < missing_rate] = np.nan
        out[name] = values
    out["label"] = (station % 3 + (out[sensor_schema(n_features)[0][0]] > 0)).astype(np.int64)
    return out


def iter_sensor_chunks(
    n_rows: int, chunk_rows: int = 1_048_576, *, n_features: int = 95, n_stations: int = 500,
    missing_rate: float = 0.01, seed: int = 0,
) -> Iterator[pd.DataFrame]:
    """Yield the sensor table as pandas chunks of about ``chunk_rows`` rows.

    Args:
        n_rows: total rows.
        chunk_rows: rows per chunk, rounded up to a multiple of :data:`BLOCK_ROWS`.
        n_features: feature columns (see :func:`sensor_schema`).
        n_stations: distinct stations; each belongs to one of :data:`REGIONS`.
        missing_rate: share of missing values in each float feature.
        seed: the same seed gives the same table, whatever the chunking.

    Returns:
        An iterator of pandas frames with columns ``station_id, region, timestamp,
        <features>, label`` (``label`` is an int64 class in 0..3).

    Example:
        >>> sum(len(c) for c in iter_sensor_chunks(100_000, 65_536))
        100000
    """
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")
    return iter_block_chunks(n_rows, chunk_rows, BLOCK_ROWS,
                             lambda i: _block(seed, i, n_features, n_stations, missing_rate))


def generate_sensor_table(
    n_rows: int, *, backend: str = "pandas", n_features: int = 95, n_stations: int = 500,
    missing_rate: float = 0.01, seed: int = 0,
) -> Any:
    """The whole sensor table in memory, on ``backend`` (``pandas | polars | cudf | auto``).

    Example:
        >>> generate_sensor_table(10, n_features=4).shape
        (10, 8)
    """
    chunks = list(iter_sensor_chunks(n_rows, max(n_rows, 1), n_features=n_features,
                                     n_stations=n_stations, missing_rate=missing_rate, seed=seed))
    table = chunks[0] if chunks else next(iter_sensor_chunks(1, n_features=n_features)).iloc[:0]
    if backend == "pandas":
        return table
    from gpufeed.gpu_transforms.tabular.frames import to_backend

    return to_backend(table, backend)


def write_sensor_table(
    path: str | os.PathLike[str], n_rows: int, *, chunk_rows: int = 1_048_576, **kwargs: Any,
) -> Path:
    """Write the sensor table chunk by chunk, never holding more than one chunk in RAM.

    Parquet (``.parquet``) is written as one row group per chunk and CSV (``.csv``) by
    appending; other formats need the whole table, so write Parquet here and convert
    with :func:`gpufeed.datasets.tables.convert`.

    Args:
        path: destination ending in ``.parquet`` or ``.csv``.
        n_rows: total rows.
        chunk_rows: rows per chunk (peak memory is about ``chunk_rows * 800`` bytes).
        **kwargs: passed to :func:`iter_sensor_chunks` (``n_features``, ``seed``, ...).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> write_sensor_table(tmp / "s.parquet", 2_000_000, chunk_rows=500_000)  # doctest: +SKIP
    """
    return write_chunks(path, iter_sensor_chunks(n_rows, chunk_rows, **kwargs))


def cached_sensor_file(n_rows: int, cache_dir: str | os.PathLike[str] | None = None, *, seed: int = 0,
                       n_features: int = 95) -> Path:
    """The sensor table as Parquet under ``cache_dir``, generated once (chunked) and reused.

    Args:
        n_rows: rows.
        cache_dir: folder for generated tables (default ``$GPUFEED_CACHE/tables``,
            ``~/.cache/gpufeed/tables`` without it).
        seed, n_features: as in :func:`iter_sensor_chunks`.

    Returns:
        Path of ``sensor-<rows>-f<features>-s<seed>-v<version>.parquet``.

    Example:
        >>> path = cached_sensor_file(1_000_000)  # doctest: +SKIP
    """
    return cached_file(f"sensor-{n_rows}-f{n_features}-s{seed}-v{GENERATOR_VERSION}.parquet", cache_dir,
                       lambda path: write_sensor_table(path, n_rows, seed=seed, n_features=n_features))
