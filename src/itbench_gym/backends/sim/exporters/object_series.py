"""Series computed per Kubernetes object, again only when the object changed.

Exporters that turn objects into series (kube-state-metrics, OpenCost's collectors) run at every scrape
over objects that mostly did not change. A family's series of an object are kept with the stored object
they came from and handed out again, the same list of the same label dicts (which the scrape cache
recognises by identity), while the store holds that very object. The store never changes a stored
object in place (a write stores a new one; snapshots share them), so the same object means the same
series — across a rewind to a snapshot too, where resourceVersions are handed out again and so could
not tell two objects apart. When an object changes, its series that keep their place and labels keep
their label dicts too (a status write mostly changes values), so the scrape cache still knows them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]
#: One object's series of one family (a kind's collector).
Family = Callable[[Obj], Iterable[Sample]]


class ObjectSeries:
    """Each (family, object)'s series, recomputed only when the store holds another object for it."""

    def __init__(self) -> None:
        #: (family, object uid) -> the stored object (held, so its id is never reused) and its series
        self._cache: dict[tuple[Family, str], tuple[Obj, list[Sample]]] = {}

    def runs(self, store: StoreLike, families: Iterable[tuple[str, Family]]) -> list[list[Sample]]:
        """Per object of each ``(kind, family)``, its series as one run; an unchanged object's run is the
        list of last time (never modified)."""
        out: list[list[Sample]] = []
        seen: set[tuple[Family, str]] = set()
        for kind, family in families:
            for obj in list_kind(store, kind):
                meta = obj["metadata"]
                key = (family, str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}"))
                seen.add(key)
                hit = self._cache.get(key)
                if hit is None or hit[0] is not obj:
                    samples = list(family(obj))
                    hit = self._cache[key] = (obj, samples if hit is None else _same_dicts(hit[1], samples))
                out.append(hit[1])
        if len(self._cache) > 2 * len(seen) + 64:
            self._cache = {k: v for k, v in self._cache.items() if k in seen}
        return out


def _same_dicts(old: list[Sample], new: list[Sample]) -> list[Sample]:
    """``new`` with the label dicts of ``old`` wherever a series keeps its place and its labels (a
    changed object mostly changes values): the scrape cache then knows them by identity."""
    return [(old[i][0], value) if i < len(old) and old[i][0] == labels else (labels, value)
            for i, (labels, value) in enumerate(new)]
