"""OpenCost's cost model (``/metrics`` on the exporter's port) from the cluster's state at each scrape.

What upstream's metrics emitter records (opencost/opencost ``pkg/costmodel/metrics.go`` with the
custom provider, ``pkg/cloud/provider/customprovider.go``), computed when Prometheus scrapes rather
than on the emitter's one-minute loop:

- per Node: the vCPU-hour and GiB-hour prices, GPU price and count, spot flag and
  ``node_total_hourly_cost`` = capacity cores x CPU price + capacity GiB x RAM price (+ GPUs), labelled
  ``instance`` and ``node`` (both the node's name), ``instance_type``, ``region``, ``provider_id``, ``arch``
  from the Node's well-known labels and ``spec.providerID``;
- per container of a Running pod: ``container_cpu_allocation`` (cores) and
  ``container_memory_allocation_bytes``, each the larger of the container's request and its usage
  (``getContainerAllocation``); usage is what the node's cAdvisor reports at this scrape: the CPU
  counter's rate since the previous scrape (upstream asks Prometheus for a 2m rate) and the memory
  working set;
- ``pv_hourly_cost`` (the storage price per GiB-hour) per PersistentVolume not Failed,
  ``pod_pvc_allocation`` (a bound claim's requested bytes shared between the pods that mount it), the
  network egress prices and the custom provider's zero cluster management fee;
- the Kubernetes series of its own collectors (:mod:`.opencost_kube`: ``kube_pod_labels`` with the
  pods' labels, ``service_selector_labels``, ``deployment_match_labels``... as its environment selects).

Prices come from the ConfigMap the exporter's ``PRICING_CONFIGMAP_NAME`` names in its
``INSTALL_NAMESPACE``, as upstream's ConfigMap watch applies it (``ProviderConfig.UpdateFromMap``):
CPU, spotCPU, RAM, spotRAM, GPU and storage are monthly figures, divided by 730 hours and kept with
six decimals (``%f``); the egress prices are taken as they are. An edit applies at once to the storage
and egress prices; the node prices are the ones the process read when it started
(``DownloadPricingData`` runs at start-up), so they change when the container restarts. A value that
does not parse leaves the prices as they were (upstream rejects the update, having applied the keys
Go's map order reached first); without the ConfigMap the process keeps OpenCost's defaults
(``DefaultPricing``). Nodes are priced at the default key: a spot or GPU price needs a spot or GPU
label in the pricing configuration, which the twin's pricing files do not set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind, parse_quantity
from itbench_gym.backends.sim.kube.errors import ApiError

from .opencost_kube import OpenCostKubeMetrics
from .scrape import ScrapeInput

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]

#: Upstream's hours per month, by which the ConfigMap's resource prices are divided.
HOURS_PER_MONTH = 730.0
GIB = float(2**30)
#: The environment variables naming the pricing ConfigMap and its namespace, and their defaults.
CONFIGMAP_ENV, NAMESPACE_ENV = "PRICING_CONFIGMAP_NAME", "INSTALL_NAMESPACE"
DEFAULT_CONFIGMAP = "pricing-configs"
#: Node labels upstream reads (``core/pkg/util/compat.go``), stable label first.
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ARCH_LABELS = ("kubernetes.io/arch", "beta.kubernetes.io/arch")
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Pricing:
    """Hourly prices: $ per vCPU, per GiB of RAM, per GPU, per GiB of storage; $ per GiB of egress."""

    cpu: float
    ram: float
    gpu: float
    storage: float
    zone_egress: float
    region_egress: float
    internet_egress: float


#: Upstream's ``DefaultPricing`` (GCP us-central1 E2), what a process without a pricing ConfigMap uses.
DEFAULT_PRICING = Pricing(cpu=0.021811, ram=0.002923, gpu=0.95, storage=0.00005479452,
                          zone_egress=0.01, region_egress=0.01, internet_egress=0.12)
#: ConfigMap keys (title-cased, as upstream compares them) -> the price they set; monthly ones first.
MONTHLY_KEYS = {"CPU": "cpu", "RAM": "ram", "GPU": "gpu", "Storage": "storage"}
EGRESS_KEYS = {"ZoneNetworkEgress": "zone_egress", "RegionNetworkEgress": "region_egress",
               "InternetNetworkEgress": "internet_egress"}


def apply_config_map(pricing: Pricing, data: Mapping[str, Any]) -> Pricing:
    """``pricing`` updated from a pricing ConfigMap's data as upstream's watch applies it; unchanged when a
    resource price does not parse. The spot prices are parsed (and so checked) but price no node here."""
    changes: dict[str, float] = {}
    for key, raw in data.items():
        title = key[:1].upper() + key[1:]
        if title in MONTHLY_KEYS or title in ("SpotCPU", "SpotRAM"):
            try:
                monthly = float(str(raw))
            except ValueError:
                return pricing
            if title in MONTHLY_KEYS:
                changes[MONTHLY_KEYS[title]] = float(f"{monthly / HOURS_PER_MONTH:f}")
        elif title in EGRESS_KEYS:
            try:
                changes[EGRESS_KEYS[title]] = float(str(raw))
            except ValueError:
                continue  # upstream stores the text; its egress gauges keep their last values
    return replace(pricing, **changes)


def _finite(value: float) -> float:
    """The emitter's guard: a price that is NaN or infinite is recorded as 0."""
    return value if math.isfinite(value) else 0.0


def _first_label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str:
    return next((labels[k] for k in keys if k in labels), "")


def _env(container: Obj, name: str) -> str | None:
    return next((str(e.get("value", "")) for e in container.get("env") or [] if e.get("name") == name), None)


def _config_map(store: StoreLike, namespace: str, name: str) -> Obj | None:
    try:
        obj: Obj = store.get_stored(store.registry.by_kind("ConfigMap"), namespace, name)  # type: ignore[attr-defined]
    except (ApiError, KeyError, LookupError):
        return None
    return obj


@dataclass(frozen=True)
class OpenCostSnapshot:
    config: Pricing
    config_version: str
    started: tuple[tuple[str, Pricing], ...]
    cpu_counters: tuple[tuple[str, tuple[float, float]], ...]


class OpenCost:
    """The cost model of the OpenCost processes the cluster runs (normally one).

    Keeps what upstream keeps between emissions: the pricing configuration, the node prices each
    process read at its start (by pod uid and restart count) and, for the CPU usage rate, each
    container instance's last CPU counter.
    """

    def __init__(self) -> None:
        self._config = DEFAULT_PRICING
        #: "namespace/name/resourceVersion" of the ConfigMap last applied
        self._config_version = ""
        self._started: dict[str, Pricing] = {}
        #: cAdvisor container instance (its ``name`` label) -> (time, CPU seconds) at the last scrape
        self._cpu: dict[str, tuple[float, float]] = {}
        #: this scrape's usage, once for every OpenCost target scraped at that time
        self._usage_at: tuple[float, dict[tuple[str, str, str], tuple[float | None, float | None]]] | None = None
        self._kube = OpenCostKubeMetrics()

    def collect(self, inputs: ScrapeInput, pod: Obj, container: Obj) -> list[Sample]:
        """What the exporter ``container`` of ``pod`` serves at ``inputs.now``."""
        store = inputs.store
        namespace = _env(container, NAMESPACE_ENV) or str(pod["metadata"].get("namespace", ""))
        self._read_config(store, namespace, _env(container, CONFIGMAP_ENV) or DEFAULT_CONFIGMAP)
        process = f"{pod['metadata'].get('uid', '')}/{self._restarts(pod, str(container.get('name', '')))}"
        node_prices = self._started.setdefault(process, self._config)
        pods = list_kind(store, "Pod")
        out = self._nodes(store, node_prices)
        out += self._containers(inputs, pods)
        out += self._volumes(store, pods)
        cfg = self._config
        out += [({"__name__": "kubecost_cluster_management_cost", "provisioner_name": ""}, 0.0),
                ({"__name__": "kubecost_network_zone_egress_cost"}, cfg.zone_egress),
                ({"__name__": "kubecost_network_region_egress_cost"}, cfg.region_egress),
                ({"__name__": "kubecost_network_internet_egress_cost"}, cfg.internet_egress)]
        return out + self._kube.collect(store, lambda name: _env(container, name))

    def _read_config(self, store: StoreLike, namespace: str, name: str) -> None:
        cm = _config_map(store, namespace, name)
        if cm is None:
            return  # a deleted ConfigMap leaves the configuration as it was
        version = f"{namespace}/{name}/{cm['metadata'].get('resourceVersion', '')}"
        if version != self._config_version:
            self._config = apply_config_map(self._config, cm.get("data") or {})
            self._config_version = version

    @staticmethod
    def _restarts(pod: Obj, container: str) -> int:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return next((int(s.get("restartCount", 0)) for s in statuses if s.get("name") == container), 0)

    @staticmethod
    def _nodes(store: StoreLike, prices: Pricing) -> list[Sample]:
        out: list[Sample] = []
        cpu_price, ram_price = _finite(prices.cpu), _finite(prices.ram)
        for node in list_kind(store, "Node"):
            meta, capacity = node["metadata"], (node.get("status") or {}).get("capacity") or {}
            labels = meta.get("labels") or {}
            name = str(meta["name"])
            base = {"instance": name, "node": name, "instance_type": _first_label(labels, INSTANCE_TYPE_LABELS),
                    "region": _first_label(labels, REGION_LABELS),
                    "provider_id": str((node.get("spec") or {}).get("providerID", "")), "arch": _first_label(labels, ARCH_LABELS)}
            cores = float(math.ceil(parse_quantity(capacity.get("cpu", "0"))))  # Quantity.Value() rounds up
            ram_gib = parse_quantity(capacity.get("memory", "0")) / GIB
            gpus = parse_quantity(capacity.get(GPU_RESOURCE, "0"))
            # the default key prices no GPU (DownloadPricingData sets only CPU and RAM there)
            total = cores * cpu_price + ram_gib * ram_price
            for metric, value in (("node_cpu_hourly_cost", cpu_price), ("node_ram_hourly_cost", ram_price),
                                  ("node_gpu_hourly_cost", 0.0), ("node_gpu_count", gpus),
                                  ("node_total_hourly_cost", total), ("kubecost_node_is_spot", 0.0)):
                out.append(({"__name__": metric, **base}, value))
        return out

    def _usage(self, inputs: ScrapeInput) -> dict[tuple[str, str, str], tuple[float | None, float | None]]:
        """(namespace, pod, container) -> (CPU cores, working-set bytes) from this scrape's cAdvisor series."""
        if self._usage_at is not None and self._usage_at[0] == inputs.now:
            return self._usage_at[1]
        usage: dict[tuple[str, str, str], tuple[float | None, float | None]] = {}
        counters: dict[str, tuple[float, float]] = {}
        for samples in inputs.cadvisor.values():
            for labels, value in samples:
                name = labels.get("__name__")
                key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
                cpu, mem = usage.get(key, (None, None))
                if name == "container_cpu_usage_seconds_total":
                    instance = labels.get("name", "")
                    counters[instance] = (inputs.now, value)
                    last = self._cpu.get(instance)
                    if last is not None and inputs.now > last[0] and value >= last[1]:
                        cpu = (value - last[1]) / (inputs.now - last[0])
                elif name == "container_memory_working_set_bytes":
                    mem = value
                usage[key] = (cpu, mem)
        self._cpu = counters
        self._usage_at = (inputs.now, usage)
        return usage

    def _containers(self, inputs: ScrapeInput, pods: list[Obj]) -> list[Sample]:
        usage = self._usage(inputs)
        out: list[Sample] = []
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node = str(spec.get("nodeName", ""))
            if (pod.get("status") or {}).get("phase") != "Running" or not node:
                continue
            for c in spec.get("containers") or []:
                labels = {"namespace": str(meta["namespace"]), "pod": str(meta["name"]), "container": str(c["name"]),
                          "instance": node, "node": node}
                requests = (c.get("resources") or {}).get("requests") or {}
                cpu, mem = usage.get((labels["namespace"], labels["pod"], labels["container"]), (None, None))
                out.append(({"__name__": "container_cpu_allocation", **labels},
                            max(parse_quantity(requests.get("cpu")), cpu or 0.0)))
                out.append(({"__name__": "container_memory_allocation_bytes", **labels},
                            max(parse_quantity(requests.get("memory")), mem or 0.0)))
        return out

    def _volumes(self, store: StoreLike, pods: list[Obj]) -> list[Sample]:
        claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in list_kind(store, "PersistentVolumeClaim")}
        mounts: list[tuple[Obj, Obj]] = []
        for pod in pods:
            namespace = pod["metadata"]["namespace"]
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                claim = claims.get((namespace, str((vol.get("persistentVolumeClaim") or {}).get("claimName", ""))))
                if claim is not None and (claim.get("spec") or {}).get("volumeName"):
                    mounts.append((pod, claim))
        times: dict[int, int] = {}
        for _, claim in mounts:
            times[id(claim)] = times.get(id(claim), 0) + 1
        out: list[Sample] = []
        for pod, claim in mounts:
            spec = claim.get("spec") or {}
            requested = parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage"))
            out.append(({"__name__": "pod_pvc_allocation", "namespace": str(pod["metadata"]["namespace"]),
                         "pod": str(pod["metadata"]["name"]), "persistentvolumeclaim": str(claim["metadata"]["name"]),
                         "persistentvolume": str(spec["volumeName"])}, requested / times[id(claim)]))
        storage = _finite(self._config.storage)
        for pv in list_kind(store, "PersistentVolume"):
            if (pv.get("status") or {}).get("phase") == "Failed":
                continue
            name = str(pv["metadata"]["name"])
            out.append(({"__name__": "pv_hourly_cost", "volumename": name, "persistentvolume": name, "provider_id": ""}, storage))
        return out

    def snapshot(self) -> OpenCostSnapshot:
        return OpenCostSnapshot(self._config, self._config_version, tuple(self._started.items()), tuple(self._cpu.items()))

    def restore(self, snap: OpenCostSnapshot) -> None:
        self._config, self._config_version = snap.config, snap.config_version
        self._started = dict(snap.started)
        self._cpu = dict(snap.cpu_counters)
        self._usage_at = None
