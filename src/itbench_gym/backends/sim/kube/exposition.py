"""What the control plane's /metrics endpoints expose, built the same way for each component."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

Sample = tuple[dict[str, str], float]


class LabelSets:
    """Each series' label dict, made once per key: the scrape cache finds a series by its dict's identity."""

    def __init__(self) -> None:
        self._made: dict[Hashable, dict[str, str]] = {}

    def get(self, key: Hashable, make: Callable[..., dict[str, str]]) -> dict[str, str]:
        labels = self._made.get(key)
        if labels is None:
            labels = self._made[key] = make()
        return labels


def le_text(bound: float) -> str:
    """Prometheus' text for a bucket bound (``1``, ``0.005``)."""
    return f"{bound:g}"


def histogram_samples(sets: LabelSets, key: Hashable, name: str, labels: Mapping[str, str],
                      buckets: Sequence[float], counts: Sequence[float]) -> list[Sample]:
    """A histogram's ``_bucket``/``_count``/``_sum`` series from cumulative bucket counts followed by the
    count and the sum; counts floored to whole observations."""
    out: list[Sample] = []
    for i, le in enumerate((*map(le_text, buckets), "+Inf")):
        value = counts[i] if i < len(buckets) else counts[-2]
        out.append((sets.get((key, le), lambda x=le: {"__name__": f"{name}_bucket", **labels, "le": x}), float(math.floor(value))))
    out.append((sets.get((key, "count"), lambda: {"__name__": f"{name}_count", **labels}), float(math.floor(counts[-2]))))
    out.append((sets.get((key, "sum"), lambda: {"__name__": f"{name}_sum", **labels}), counts[-1]))
    return out
