"""What saved iteration states share: settings as plain data, and the named differences
that make a state belong to another dataset or pipeline (a loader's ``state_dict``, a
DALI reader iterator's checkpoint)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def plain(value: object) -> object:
    """A setting as JSON-able data, equal to itself after a round trip (enums by value,
    tuples as lists, dtypes by name)."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, torch.dtype):
        return str(value)
    return getattr(value, "value", value)


def settings_of(options: object, names: Iterable[str]) -> dict[str, Any]:
    """``{name: plain(options.name)}`` for the settings a state records."""
    return {name: plain(getattr(options, name)) for name in names}


#: Dataset keys a saved state may lack, having been taken before they were recorded: not
#: compared then (a shard set's ``layout`` digest, 2026-11-26), so older checkpoints resume.
ADDED_LATER = frozenset({"layout"})


def differences(group: str, saved: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """``"<group> <key>: saved <a>, this loader <b>"`` for each key whose values differ
    (in the ``dataset`` group, a key of :data:`ADDED_LATER` only where the saved state has
    it: the settings have a ``layout`` of their own, always recorded)."""
    later = ADDED_LATER - set(saved) if group == "dataset" else frozenset()
    keys = set(saved) | (set(mine) - later)
    return [f"{group} {k}: saved {saved.get(k)!r}, this loader {mine.get(k)!r}"
            for k in sorted(keys) if saved.get(k) != mine.get(k)]
