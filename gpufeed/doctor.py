"""``gpufeed doctor``: what this machine has, and which backend each loader will pick and why."""

from __future__ import annotations

import json
import platform
from typing import Any

from gpufeed.backends import choose_dataframe_backend, choose_image_backend, resolve_device
from gpufeed.bench.provenance import SourceCommit, gpufeed_version, source_commit
from gpufeed.machine import (
    cpu_details,
    cpu_model,
    cpu_words,
    cuda_available,
    gpu_metadata,
    installed,
    library_version,
    usable_cpus,
    version_of,
)


def report() -> dict[str, Any]:
    """The doctor's findings as a dict (what ``gpufeed doctor --json`` prints): gpufeed's own
    version and commit first (a bug report names the code it is about), then the machine."""
    import torch

    device = resolve_device("auto")
    image = choose_image_backend("auto", device)
    table = choose_dataframe_backend("auto")
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch CUDA build": torch.version.cuda,
        "torchvision": version_of("torchvision"),
        "DALI": library_version("DALI"),
        "kornia": version_of("kornia"),
        "cupy": library_version("cupy"),
        "cuDF": library_version("cuDF"),
        "polars": version_of("polars"),
        "pandas": version_of("pandas"),
        "narwhals": version_of("narwhals"),
    }
    notes = []
    if versions["cuDF"] and not cuda_available():
        notes.append("cuDF is installed but there is no CUDA GPU: tables use the CPU backend")
    if installed("cupy") and not cuda_available():
        notes.append("cupy is installed but cannot run without a CUDA GPU: arrays stay numpy")
    commit = source_commit()
    return {
        "gpufeed": {"version": gpufeed_version(), "commit": commit.commit, "commit_note": commit.note},
        "cpu": {"model": cpu_model(), "details": cpu_details(), "usable_cores": usable_cpus()},
        "gpu": gpu_metadata(),
        "versions": versions,
        "choices": {
            "image loader (classification_loader backend='auto')":
                {"backend": image.name, "device": str(device), "why": image.reason},
            "tables (backend='auto')": {"backend": table.name, "why": table.reason},
        },
        "notes": notes,
    }


def run(as_json: bool = False) -> int:
    """Print the report; returns the exit status (0)."""
    r = report()
    if as_json:
        print(json.dumps(r, indent=2))
        return 0
    gpu = r["gpu"]
    print("gpufeed doctor")
    own = r["gpufeed"]
    print(f"  gpufeed  {own['version']}, commit {SourceCommit(own['commit'], own['commit_note']).text(markdown=False)}")
    print(f"  CPU      {cpu_words(r['cpu']['model'], r['cpu']['details'])}, {r['cpu']['usable_cores']} usable cores")
    if gpu:
        print(f"  GPU      {gpu['name']} x{gpu['count']}, driver {gpu.get('driver')}, "
              f"CUDA runtime {gpu['cuda_runtime']}, {gpu.get('memory', '?')}")
    else:
        print("  GPU      none visible to torch (CPU paths only)")
    print("  versions")
    for name, v in r["versions"].items():
        print(f"    {name:<17}{v or 'not installed'}")
    print("  backend choices")
    for what, c in r["choices"].items():
        where = f" on {c['device']}" if "device" in c else ""
        print(f"    {what}: {c['backend']}{where} ({c['why']})")
    for note in r["notes"]:
        print(f"  note: {note}")
    return 0
