"""Find the bottleneck of a training loop: is it waiting for data, or computing?

- :class:`StallMeter` (``stall.py``): wrap the loop's batches; per step, the wait for the
  next batch vs the time in the step (CUDA-synchronised on a GPU).
- :class:`StallReport` (``report.py``): stall %, throughput, per-step times; text, JSON and
  a timeline PNG (``plot.py``).
- :func:`what_if` (``whatif.py``): the model alone, the loader alone, both together, and
  the verdict (input-bound by X % or compute-bound) with the loader that would keep up.
- ``gpufeed stall`` (``command.py``, with ``models.py`` and ``loaders.py``): all of it end
  to end on an image folder.
"""

from gpufeed.profile.report import StallReport
from gpufeed.profile.stall import StallMeter
from gpufeed.profile.whatif import WhatIf, loader_rate, model_rate, what_if

__all__ = ["StallMeter", "StallReport", "WhatIf", "loader_rate", "model_rate", "what_if"]
