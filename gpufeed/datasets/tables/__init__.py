"""Tables in and out of files: CSV, Parquet, Feather, pickle, HDF5 and JSON on any backend.

- :mod:`.io`: :func:`read_table` (and :func:`read_table_with_report`), :func:`write_table`
  and :func:`convert`; malformed CSV lines raised or skipped and reported.
- :mod:`.formats`: the registry :data:`FORMATS` (one :class:`TableFormat` entry a format,
  :mod:`.base`) and :func:`detect_format`; the formats in :mod:`.csv`, :mod:`.json` and
  :mod:`.binary`.

The errors they raise are in :mod:`gpufeed.gpu_transforms.tabular.errors`.

Example:
    >>> from gpufeed.datasets.tables import detect_format
    >>> detect_format("readings.csv.gz")
    'csv'
"""

from gpufeed.datasets.tables.base import ReadReport, TableFormat
from gpufeed.datasets.tables.formats import FORMATS, detect_format
from gpufeed.datasets.tables.io import convert, read_table, read_table_with_report, write_table

__all__ = [
    "FORMATS", "ReadReport", "TableFormat", "convert", "detect_format", "read_table", "read_table_with_report",
    "write_table",
]
