"""Endpoints controller: which pod IPs stand behind each Service.

The app model routes traffic through this object (a Service whose selector matches no ready pod
has no ``addresses``, so its callers fail), and agents read it with ``kubectl get endpoints`` or
``describe svc``. Mirrors ``pkg/controller/endpoint``: ready pods in ``addresses``, unready ones
in ``notReadyAddresses`` (unless ``publishNotReadyAddresses``), terminating pods dropped, named
target ports resolved per pod, subsets grouped by identical port sets. The same pods also go into
the Service's EndpointSlices (``discovery.k8s.io/v1``, one per port set, as
``pkg/controller/endpointslice`` writes them), which ``kubectl describe svc`` reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.selectors import LabelIndex, SelectorIndex

from ..errors import ApiError, is_storage_error
from ..store import clone
from .base import Cache, Context, Controller, Key
from .util import controller_ref, is_pod_ready, is_terminating, pod_phase

Obj = dict[str, Any]


def _resolve_port(pod: Obj, port: Obj) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    protocol = port.get("protocol", "TCP")
    for c in (pod.get("spec") or {}).get("containers") or []:
        for cp in c.get("ports") or []:
            if cp.get("name") == target and cp.get("protocol", "TCP") == protocol:
                return int(cp["containerPort"])
    return None


def _selector(svc: Obj) -> Obj:
    selector: Obj = (svc.get("spec") or {}).get("selector") or {}
    return selector


def _endpoint_view(pod: Obj | None) -> tuple[Any, ...] | None:
    """What of a pod an Endpoints object reflects (upstream ``podEndpointsChanged``, plus labels)."""
    if pod is None:
        return None
    meta = pod["metadata"]
    status = pod.get("status") or {}
    return (meta.get("labels"), meta.get("uid"), status.get("podIP"), is_pod_ready(pod), is_terminating(pod),
            pod_phase(pod) in ("Succeeded", "Failed"), (pod.get("spec") or {}).get("nodeName"))


SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"


class EndpointsController(Controller):
    """Syncs a Service from the pods its selector picks out of per-namespace label indexes: a pod
    event and a sync then cost what the Services and pods concerned cost, not a scan of all of them.

    The indexes are built from the informer cache on first use; pod events then update the pods'
    as they update the cache, a Service event drops the Services' (rare), a restore drops both.
    """

    name = "endpoints"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._pods: dict[str, LabelIndex[Key, Obj]] = {}
        self._services: dict[str, SelectorIndex[Key]] = {}

    def restore_state(self, state: Any) -> None:
        self._pods.clear()
        self._services.clear()

    def _pods_of(self, svc: Obj) -> list[Obj]:
        """The cached pods of the Service's namespace its (non-empty) selector matches, in cache order."""
        selector = _selector(svc)
        if not selector:
            return []
        ns = svc["metadata"].get("namespace") or ""
        index = self._pods.get(ns)
        if index is None:
            index = self._pods[ns] = LabelIndex((Cache.key_of(p), p, p["metadata"].get("labels")) for p in self.ctx.cache.list("Pod", ns))
        return index.matching(selector)

    def _services_selecting(self, ns: str, *pods: Obj | None) -> list[Key]:
        """Keys of the namespace's Services whose selector matches any of ``pods``, in cache order."""
        index = self._services.get(ns)
        if index is None:
            index = self._services[ns] = SelectorIndex((Cache.key_of(s), _selector(s)) for s in self.ctx.cache.list("Service", ns))
        return index.selecting(*(p["metadata"].get("labels") for p in pods if p is not None))

    def _track(self, event: str, pod: Obj) -> None:
        """Apply a pod event to its namespace's index as the informer cache applied it."""
        key = Cache.key_of(pod)
        index = self._pods.get(key[0])
        if index is None:
            return
        if event == "DELETED":
            index.remove(key)
        else:
            index.put(key, pod, pod["metadata"].get("labels"))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Pod":
            self._track(event, obj)
        if kind == "Service":
            self._services.pop(obj["metadata"].get("namespace") or "", None)
            return [Cache.key_of(obj)]
        if kind == "Endpoints" and event == "DELETED":
            return [Cache.key_of(obj)]  # recreated if its Service still exists
        if kind == "EndpointSlice" and event == "DELETED":
            name = (obj["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
            return [(obj["metadata"].get("namespace") or "", name)] if name else []
        if kind == "Pod":
            new = None if event == "DELETED" else obj
            if _endpoint_view(new) == _endpoint_view(old):
                return ()  # e.g. a Pending pod's scheduling status: no Service's endpoints change
            if not (obj.get("status") or {}).get("podIP") and not ((old or {}).get("status") or {}).get("podIP"):
                return ()  # without an address, before and after, it is in no Endpoints or slice
            return self._services_selecting(obj["metadata"].get("namespace") or "", obj, old)
        return ()

    def sync(self, key: Key) -> None:
        svc = self.ctx.cache.get("Service", *key)
        current = self.ctx.cache.get("Endpoints", *key)
        spec = (svc or {}).get("spec") or {}
        if svc is not None and spec.get("selector"):
            self._sync_slices(svc)
        if svc is None or not spec.get("selector"):
            if svc is None and current is not None:
                try:
                    self.ctx.store.delete("Endpoints", key[0], key[1])
                except ApiError as e:
                    if e.code != 404:
                        raise
            return
        subsets = self._subsets(svc)
        labels = dict(svc["metadata"].get("labels") or {})
        if spec.get("clusterIP") == "None":
            labels["service.kubernetes.io/headless"] = ""
        if current is None:
            ep: Obj = {
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": key[1], "namespace": key[0], "labels": labels},
            }
            if subsets:
                ep["subsets"] = subsets
            try:
                self.ctx.store.create(ep)
            except ApiError as e:
                if e.code not in (404, 403, 409) and not is_storage_error(e):
                    raise
            return
        if (current.get("subsets") or []) == subsets and (current["metadata"].get("labels") or {}) == labels:
            return
        new = clone(current)
        new["metadata"]["labels"] = labels
        if subsets:
            new["subsets"] = subsets
        else:
            new.pop("subsets", None)
        try:
            self.ctx.store.update(new)
        except ApiError as e:
            if e.code not in (404, 409) and not is_storage_error(e):
                raise

    def _subsets(self, svc: Obj) -> list[Obj]:
        spec = svc.get("spec") or {}
        publish_unready = bool(spec.get("publishNotReadyAddresses"))
        groups: dict[tuple[tuple[str, int, str], ...], dict[str, list[Obj]]] = {}
        ns = svc["metadata"].get("namespace") or ""
        for pod in self._pods_of(svc):
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if not ip or is_terminating(pod) or pod_phase(pod) in ("Succeeded", "Failed"):
                continue
            ports: list[tuple[str, int, str]] = []
            for port in spec.get("ports") or []:
                number = _resolve_port(pod, port)
                if number is not None:
                    ports.append((port.get("name", ""), number, port.get("protocol", "TCP")))
            if not ports and spec.get("ports"):
                continue
            address: Obj = {"ip": ip}
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                address["nodeName"] = node
            address["targetRef"] = {"kind": "Pod", "namespace": ns, "name": pod["metadata"]["name"],
                                    "uid": pod["metadata"].get("uid", "")}
            group = groups.setdefault(tuple(sorted(ports)), {"addresses": [], "notReadyAddresses": []})
            ready = is_pod_ready(pod) or publish_unready
            group["addresses" if ready else "notReadyAddresses"].append(address)
        subsets = []
        for ports_key, addrs in sorted(groups.items()):
            subset: Obj = {}
            for field in ("addresses", "notReadyAddresses"):
                if addrs[field]:
                    subset[field] = sorted(addrs[field], key=lambda a: (a["ip"], a["targetRef"]["name"]))
            if ports_key:
                subset["ports"] = [
                    {**({"name": n} if n else {}), "port": p, "protocol": proto} for n, p, proto in ports_key
                ]
            subsets.append(subset)
        return subsets

    # -- EndpointSlices ---------------------------------------------------------------------------

    def _slice_groups(self, svc: Obj) -> dict[tuple[tuple[str, int, str], ...], list[Obj]]:
        """Endpoints per port set; terminating pods stay in, marked ``terminating``."""
        spec = svc.get("spec") or {}
        publish_unready = bool(spec.get("publishNotReadyAddresses"))
        ns = svc["metadata"].get("namespace") or ""
        groups: dict[tuple[tuple[str, int, str], ...], list[Obj]] = {}
        for pod in self._pods_of(svc):
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if not ip or pod_phase(pod) in ("Succeeded", "Failed"):
                continue
            ports = []
            for port in spec.get("ports") or []:
                number = _resolve_port(pod, port)
                if number is not None:
                    ports.append((port.get("name", ""), number, port.get("protocol", "TCP")))
            ready = is_pod_ready(pod)
            terminating = is_terminating(pod)
            endpoint: Obj = {"addresses": [ip],
                             "conditions": {"ready": (ready or publish_unready) and not terminating,
                                            "serving": ready or publish_unready, "terminating": terminating}}
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                endpoint["nodeName"] = node_name
                zone = ((self.ctx.cache.get("Node", "", node_name) or {}).get("metadata", {}).get("labels") or {}).get(
                    "topology.kubernetes.io/zone")
                if zone:
                    endpoint["zone"] = zone
            endpoint["targetRef"] = {"kind": "Pod", "namespace": ns, "name": pod["metadata"]["name"],
                                     "uid": pod["metadata"].get("uid", "")}
            groups.setdefault(tuple(sorted(ports)), []).append(endpoint)
        for endpoints in groups.values():
            endpoints.sort(key=lambda e: (e["addresses"][0], e["targetRef"]["name"]))
        return groups

    def _sync_slices(self, svc: Obj) -> None:
        ns = svc["metadata"].get("namespace") or ""
        labels = {**(svc["metadata"].get("labels") or {}), SERVICE_NAME_LABEL: svc["metadata"]["name"],
                  MANAGED_BY_LABEL: SLICE_CONTROLLER}
        groups = self._slice_groups(svc)
        existing: list[Obj] = sorted(self.ctx.cache.owned("EndpointSlice", svc), key=lambda o: o["metadata"]["name"])
        by_ports = {tuple(sorted((p.get("name", ""), p.get("port", 0), p.get("protocol", "TCP"))
                                 for p in o.get("ports") or [])): o for o in existing}
        wanted: list[tuple[tuple[tuple[str, int, str], ...], list[Obj]]] = sorted(groups.items()) or [((), [])]
        keep: set[str] = set()
        for ports_key, endpoints in wanted:
            body: Obj = {"addressType": "IPv4", "endpoints": endpoints,
                         "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports_key] or None}
            current = by_ports.get(ports_key)
            if current is None and len(wanted) == 1 and existing:
                current = existing[0]  # reuse the slice whose ports changed
            try:
                if current is None:
                    self.ctx.store.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                           "metadata": {"generateName": svc["metadata"]["name"] + "-", "namespace": ns,
                                                        "labels": labels, "ownerReferences": [controller_ref(svc)]},
                                           **{k: v for k, v in body.items() if v is not None}})
                    continue
                keep.add(current["metadata"]["name"])
                if all(current.get(k) == v for k, v in body.items()) and current["metadata"].get("labels") == labels:
                    continue
                new = clone(current)
                new["metadata"]["labels"] = labels
                for k, v in body.items():
                    if v is None:
                        new.pop(k, None)
                    else:
                        new[k] = v
                self.ctx.store.update(new)
            except ApiError as e:
                if e.code not in (404, 403, 409) and not is_storage_error(e):
                    raise
        for o in existing:
            if o["metadata"]["name"] not in keep:
                try:
                    self.ctx.store.delete("EndpointSlice", ns, o["metadata"]["name"])
                except ApiError as e:
                    if e.code != 404:
                        raise
