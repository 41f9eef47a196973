"""What the control plane's /metrics endpoints expose, built the same way for each component."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

Sample = tuple[dict[str, str], float]


class LabelSets:
    """Each series' label dict, made once per key: the scrape cache finds a series by its dict's identity."""

    def __init__(self) -> None:
        self._made: dict[Hashable, dict[str, str]] = {}
        self._families: dict[Hashable, list[dict[str, str]]] = {}

    def get(self, key: Hashable, make: Callable[..., dict[str, str]]) -> dict[str, str]:
        labels = self._made.get(key)
        if labels is None:
            labels = self._made[key] = make()
        return labels

    def family(self, key: Hashable, make: Callable[[], list[dict[str, str]]]) -> list[dict[str, str]]:
        """The label dicts of several series made together (a histogram's), once per key."""
        made = self._families.get(key)
        if made is None:
            made = self._families[key] = make()
        return made


def le_text(bound: float) -> str:
    """Prometheus' text for a bucket bound (``1``, ``0.005``)."""
    return f"{bound:g}"


def histogram_samples(sets: LabelSets, key: Hashable, name: str, labels: Mapping[str, str],
                      buckets: Sequence[float], counts: Sequence[float]) -> list[Sample]:
    """A histogram's ``_bucket``/``_count``/``_sum`` series from cumulative bucket counts followed by the
    count and the sum; counts floored to whole observations."""
    series = sets.family(key, lambda: [*({"__name__": f"{name}_bucket", **labels, "le": le} for le in (*map(le_text, buckets), "+Inf")),
                                       {"__name__": f"{name}_count", **labels}, {"__name__": f"{name}_sum", **labels}])
    total = float(math.floor(counts[-2]))
    values = [float(math.floor(v)) for v in counts[:len(buckets)]]
    return list(zip(series, [*values, total, total, counts[-1]], strict=True))
