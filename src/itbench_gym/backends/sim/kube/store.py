"""The twin's object store: what etcd plus the API server's registry layer do in a real cluster.

Objects are plain JSON dicts as the API serves them. Stored dicts are never mutated in place
(every write stores a fresh dict), which makes ``snapshot()`` a cheap copy of the index dicts and
lets the watch log and the subscribers (the controllers' informer cache) share objects with the
store. What ``get``, ``list``, ``create`` and ``update`` return is a copy, so callers may edit it.

Semantics follow the real API server: monotonic ``resourceVersion``, ``generation`` bumped on spec
changes only, optimistic concurrency, the ``status`` subresource, graceful pod deletion,
finalizers, ownerReference garbage collection (Background / Foreground / Orphan) and namespace
termination. Time comes from the injected clock and uids from a seeded counter, so two stores fed
the same calls are identical.

Storage is bounded the way etcd bounds it: every object is charged its serialized size plus etcd's
per-key overhead against a quota (``--quota-backend-bytes``), one object may not exceed etcd's
``--max-request-bytes``, and a write that would go over answers etcd's own error. Events are charged
to a quota of their own, as clusters that keep Events in a separate etcd do, so the warnings about a
full store can still be recorded. Deletions (and the writes a deletion makes) are never refused, and
history older than the API server's compaction interval is dropped from the watch log.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from itbench_gym.clock import Clock
from itbench_gym.lang.timestamps import rfc3339

from . import admission, errors, rbac
from .controllers.util import name_suffix
from .resources import ResourceRegistry, ResourceType
from .selectors import fields_match, parse_field_selector, parse_label_selector
from .webhooks import WebhookDispatcher

Obj = dict[str, Any]
Key = tuple[tuple[str, str], str, str]  # (storage key, namespace or "", name)
Listener = Callable[[str, Obj], None]

#: Namespaces every real cluster has.
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
#: How many changes the watch log keeps at most; older resourceVersions answer 410 Expired.
WATCH_LOG_SIZE = 200_000
#: kube-apiserver compacts etcd's history this often (``--etcd-compaction-interval``, 5m): changes
#: older than this leave the watch log, so its memory is bounded by the write rate, not by time.
COMPACTION_INTERVAL_SECONDS = 300.0
#: etcd's default ``--quota-backend-bytes`` is 2 GiB. The twin sizes its quota to bound the process
#: instead: an object costs about seven times its serialized size in Python (store, informer cache,
#: watch log), and every pod adds telemetry series besides. 4 MiB is twelve times a loaded Astronomy
#: Shop cluster (0.35 MiB) and about 1100 Pending pods, three times what its three nodes can run.
DEFAULT_QUOTA_BYTES = 4 * 2**20
#: Events are charged to their own quota (kube-up's separate ``etcd-events`` behind
#: ``--etcd-servers-overrides=/events#...``), so a full store can still say why it is full.
DEFAULT_EVENT_QUOTA_BYTES = 4 * 2**20
#: etcd's default ``--max-request-bytes`` (1.5 MiB): the largest object one write may store.
MAX_REQUEST_BYTES = 1536 * 1024
#: What etcd's quota charges each key besides its value (``kvOverhead`` in server/storage/quota.go).
KV_OVERHEAD = 256
EVENTS_STORAGE_KEY = ("", "events")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's utilrand alphabet (no vowels, no 0/1/3)


_T = TypeVar("_T")


def clone(o: _T) -> _T:
    """Deep copy of JSON-like data; several times faster than ``copy.deepcopy``."""
    return cast(_T, _clone(o))


def _clone(data: Any) -> Any:
    if type(data) is dict:
        return {k: _clone(v) if type(v) in (dict, list) else v for k, v in data.items()}
    if type(data) is list:
        return [_clone(v) if type(v) in (dict, list) else v for v in data]
    return data


@dataclass(frozen=True)
class WatchEvent:
    """One change in the watch log; ``obj`` is the stored (storage-version) object, read-only."""

    resource_version: int
    type: str  # ADDED | MODIFIED | DELETED
    storage_key: tuple[str, str]
    namespace: str
    obj: Obj
    at: float = 0.0  # when it happened (the store's clock), for compaction


@dataclass(frozen=True)
class StorageUsage:
    """What the store holds against its quotas, in etcd's accounting (bytes incl. per-key overhead)."""

    bytes: int
    quota_bytes: int
    objects: int
    event_bytes: int
    event_quota_bytes: int
    events: int


@dataclass(frozen=True)
class StoreSnapshot:
    data: dict[tuple[str, str], dict[str, dict[str, Obj]]]
    rv: int
    uid_counter: int
    name_counter: int
    allocations: admission.Allocations
    registry: Any
    sizes: dict[Key, int]


class ObjectStore:
    """In-memory Kubernetes object store with API-server semantics."""

    def __init__(
        self,
        clock: Clock,
        registry: ResourceRegistry | None = None,
        *,
        seed: int = 0,
        system_namespaces: Iterable[str] = SYSTEM_NAMESPACES,
        bootstrap_rbac: bool = True,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        event_quota_bytes: int = DEFAULT_EVENT_QUOTA_BYTES,
    ) -> None:
        self.clock = clock
        self.registry = registry or ResourceRegistry()
        self.seed = seed
        self.quota_bytes = quota_bytes
        self.event_quota_bytes = event_quota_bytes
        #: storage size of every stored object, and the totals per quota (main, events)
        self._sizes: dict[Key, int] = {}
        self._used = [0, 0]
        self._data: dict[tuple[str, str], dict[str, dict[str, Obj]]] = {}
        self._rv = 0
        self._uid_counter = 0
        self._name_counter = 0
        self._alloc = admission.Allocations(seed)
        self._listeners: list[Listener] = []
        self._settlers: list[Callable[[], None]] = []
        self._log: deque[WatchEvent] = deque(maxlen=WATCH_LOG_SIZE)
        self._log_floor = 0  # events with rv <= floor are no longer in the log
        self._finishing: set[str] = set()  # namespaces whose last Events are being removed
        #: dynamic admission (``webhooks.py``): every write passes the validating webhooks when set
        self.webhooks: WebhookDispatcher | None = None
        self._rebuild_indexes()
        for ns in system_namespaces:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if bootstrap_rbac:
            rbac.bootstrap(self)

    # -- public API ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out (what a list response carries)."""
        return self._rv

    def usage(self) -> StorageUsage:
        """Bytes and objects charged to the main and the Events quota."""
        events = sum(len(objs) for objs in self._data.get(EVENTS_STORAGE_KEY, {}).values())
        return StorageUsage(self._used[0], self.quota_bytes, len(self._sizes) - events,
                            self._used[1], self.event_quota_bytes, events)

    def create(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        rt = self._type_of(obj)
        stype = self.registry.storage_type(rt)
        new = self.registry.convert(clone(obj), stype) if rt is not stype else clone(obj)
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        ns = self._namespace_for(rt, meta)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(rt.group, rt.kind, "", [
                    ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")])
            meta["name"] = prefix + self._random_suffix()
        name = meta["name"]
        if ns:
            self._check_namespace_accepts(ns, rt, name)
        admission.default(rt, new, self._alloc)
        if stype.kind == "Pod" and not stype.group:
            self._admit_service_account(new, ns)
        admission.admit_create(stype, new)
        admission.validate(rt, new, None)
        if name in self._bucket(stype.storage_key).get(ns, {}):
            raise errors.already_exists(rt.group, rt.plural, name)
        for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = rfc3339(self.clock.now())
        if admission.has_generation(stype, new):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if self.webhooks is not None:
            self.webhooks.admit("CREATE", stype, new, None, None, dry_run)
        if dry_run:
            meta["resourceVersion"] = str(self._rv)
            return self.registry.convert(new, rt)
        admission.after_create(stype, new)
        try:
            self._write(stype, new, "ADDED")
        except errors.ApiError:
            self._alloc.release(new)  # the API server hands back what admission allocated to a failed create
            raise
        if stype.group == "apiextensions.k8s.io" and stype.kind == "CustomResourceDefinition":
            self.registry.add_crd(new)
        return clone(self.registry.convert(new, rt))

    def get(self, kind: str, namespace: str | None, name: str, api_version: str | None = None) -> Obj:
        rt = self.registry.by_kind(kind, api_version)
        return clone(self.registry.convert(self._get_stored(rt, namespace, name), rt))

    def get_stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object itself (storage version, do not modify): for serialisation paths."""
        return self._get_stored(rt, namespace, name)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        api_version: str | None = None,
    ) -> builtins.list[Obj]:
        rt = self.registry.by_kind(kind, api_version)
        return [clone(self.registry.convert(o, rt)) for o in self.list_stored(rt, namespace, label_selector, field_selector)]

    def list_stored(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """Matching stored objects sorted by (namespace, name); read-only, storage version."""
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt.kind, rt.custom)
        bucket = self._bucket(rt.storage_key)
        if namespace and rt.namespaced:
            groups = [bucket.get(namespace, {})]
        else:
            groups = [bucket[ns] for ns in sorted(bucket)]
        out: builtins.list[Obj] = []
        for group in groups:
            for name in sorted(group):
                o = group[name]
                if labels.requirements or labels.match_nothing:
                    if not labels.matches(o["metadata"].get("labels")):
                        continue
                if fields and not fields_match(o, fields):
                    continue
                out.append(o)
        return out

    def update(self, obj: Obj, *, subresource: str | None = None, dry_run: bool = False, copy_result: bool = True) -> Obj:
        """Store ``obj``; returns the stored object as its version serves it, a copy the caller may
        change unless ``copy_result`` is False (then the store's own: read-only, as controllers
        read the objects of their cache)."""
        rt = self._type_of(obj)
        stype = self.registry.storage_type(rt)
        if rt is not stype:
            incoming = self.registry.convert(clone(obj), stype)
        elif subresource == "status":  # a status write keeps everything but the status: copy only what is read
            incoming = {k: clone(obj[k]) for k in ("metadata", "status") if k in obj}
        else:
            incoming = clone(obj)
        meta = incoming.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise errors.invalid(rt.group, rt.kind, "", [("FieldValueRequired", "metadata.name", "Required value: name is required")])
        ns = self._namespace_for(rt, meta)
        old = self._get_stored(rt, ns, meta["name"])
        self._check_precondition(rt, old, meta.get("resourceVersion"))
        new = self._merge_update(stype, old, incoming, subresource)
        out = self.registry.convert(self._commit_update(stype, old, new, dry_run=dry_run, subresource=subresource), rt)
        return clone(out) if copy_result else out

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        api_version: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        decode: Callable[[ResourceType, Obj], None] | None = None,
    ) -> Obj:
        """Apply a merge / json / strategic / apply patch (short names or content types).

        ``decode`` vets the object the patch produces before anything else sees it, and may drop what
        decoding it would lose (the API server's type check and pruning; internal callers trust themselves).
        """
        from . import patch as patching  # patch depends on resources only; imported lazily to keep layering flat

        rt = self.registry.by_kind(kind, api_version)
        ptype = patching.normalize_patch_type(patch_type)
        doc = patching.decode_patch(patch, ptype)
        stype = self.registry.storage_type(rt)
        ns = namespace if rt.namespaced else ""
        existing = self._bucket(stype.storage_key).get(ns or "", {}).get(name)
        if existing is None:
            if ptype != patching.APPLY:
                raise errors.not_found(rt.group, rt.plural, name)
            return self._apply_create(rt, ns, name, doc, field_manager, dry_run, decode)
        current = clone(self.registry.convert(existing, rt))
        if ptype == patching.APPLY:
            patched = patching.server_side_apply(current, doc, rt, manager=_manager(field_manager), force=force,
                                                 now=rfc3339(self.clock.now()), subresource=subresource)
        else:
            patched = patching.apply_patch(current, doc, ptype, rt)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        if decode is not None:
            decode(rt, patched)
        pmeta = patched.setdefault("metadata", {})
        if pmeta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({pmeta.get('name')}) does not match the name on the URL ({name})")
        if not _sets_resource_version(doc, ptype):
            pmeta["resourceVersion"] = existing["metadata"]["resourceVersion"]
        pmeta["name"] = name
        if rt.namespaced:
            pmeta["namespace"] = ns
        patched["kind"] = rt.kind
        patched["apiVersion"] = rt.api_version
        if ptype != patching.APPLY and field_manager:
            patching.record_update_manager(patched, _manager(field_manager), rfc3339(self.clock.now()), subresource)
        return self.update(patched, subresource=subresource, dry_run=dry_run)

    def delete(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str = "Background",
        grace_period_seconds: int | None = None,
        preconditions: dict[str, str] | None = None,
        dry_run: bool = False,
        api_version: str | None = None,
    ) -> Obj:
        """Delete like the API server; returns the object as it was (or is, while terminating)."""
        rt = self.registry.by_kind(kind, api_version)
        if propagation_policy not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(
                f'propagationPolicy: Unsupported value: "{propagation_policy}": supported values: "Foreground", "Background", "Orphan"')
        old = self._get_stored(rt, namespace, name)
        if preconditions:
            if preconditions.get("uid") and preconditions["uid"] != old["metadata"]["uid"]:
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                                      f"UID in object meta: {old['metadata']['uid']}")
            if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                                      f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}")
        stype = self.registry.storage_type(rt)
        if self.webhooks is not None:
            self.webhooks.admit("DELETE", stype, None, old, None, dry_run)
        if dry_run:
            return clone(self.registry.convert(old, rt))
        out = self._delete(stype, old, propagation_policy, grace_period_seconds)
        return clone(self.registry.convert(out, rt))

    def delete_collection(
        self,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: str = "Background",
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
        api_version: str | None = None,
    ) -> builtins.list[Obj]:
        rt = self.registry.by_kind(kind, api_version)
        victims = self.list_stored(rt, namespace, label_selector, field_selector)
        return [
            self.delete(kind, o["metadata"].get("namespace"), o["metadata"]["name"],
                        propagation_policy=propagation_policy, grace_period_seconds=grace_period_seconds,
                        dry_run=dry_run, api_version=api_version)
            for o in victims
        ]

    def subscribe(self, fn: Listener) -> None:
        """``fn(type, obj)`` runs after every change; ``obj`` is the stored object (storage version),
        shared with the store, the watch log and every other listener, so it must not be modified.

        Listeners run synchronously inside the write; a listener that writes to the store should
        queue its work (controllers reconcile later) rather than recurse.
        """
        self._listeners.append(fn)

    def unsubscribe(self, fn: Listener) -> None:
        self._listeners.remove(fn)

    def on_settle(self, fn: Callable[[], None]) -> None:
        """``fn()`` runs when a client's write request has committed (see ``settle``)."""
        self._settlers.append(fn)

    def settle(self) -> None:
        """A client's write is done: let the control plane react now, as a real one does within a
        second (a scaled Deployment has its pods before the next ``kubectl get``)."""
        for fn in list(self._settlers):
            fn()

    def events_since(
        self,
        resource_version: int,
        rt: ResourceType | None = None,
        namespace: str | None = None,
    ) -> builtins.list[WatchEvent]:
        """Changes after ``resource_version`` (optionally of one resource / namespace), oldest first.

        Raises 410 Expired when the log no longer reaches back that far, like etcd compaction.
        """
        if resource_version < self._log_floor:
            raise errors.gone(f"too old resource version: {resource_version} ({self._log_floor + 1})")
        skey = rt.storage_key if rt is not None else None
        ns = namespace if (rt is None or rt.namespaced) else None
        out = []
        for ev in reversed(self._log):
            if ev.resource_version <= resource_version:
                break
            if skey is not None and ev.storage_key != skey:
                continue
            if ns and ev.namespace != ns:
                continue
            out.append(ev)
        out.reverse()
        return out

    def snapshot(self) -> StoreSnapshot:
        return StoreSnapshot(
            data={sk: {ns: dict(objs) for ns, objs in b.items()} for sk, b in self._data.items()},
            rv=self._rv,
            uid_counter=self._uid_counter,
            name_counter=self._name_counter,
            allocations=self._alloc.copy(),
            registry=self.registry.snapshot(),
            sizes=dict(self._sizes),
        )

    def reseed(self, seed: int) -> None:
        """Draw later uids, generated names and allocations from ``seed`` (``KubeCluster.reseed``)."""
        self.seed = seed
        self._alloc.seed = seed

    def restore(self, snap: StoreSnapshot) -> None:
        """Return to ``snap``; open watches must be restarted (the watch log is cleared)."""
        self._data = {sk: {ns: dict(objs) for ns, objs in b.items()} for sk, b in snap.data.items()}
        self._rv = snap.rv
        self._uid_counter = snap.uid_counter
        self._name_counter = snap.name_counter
        self._alloc = snap.allocations.copy()
        self.registry.restore(snap.registry)
        self._log.clear()
        self._log_floor = self._rv
        self._sizes = dict(snap.sizes)
        self._used = [0, 0]
        for key, size in self._sizes.items():
            self._used[key[0] == EVENTS_STORAGE_KEY] += size
        self._rebuild_indexes()

    def namespaces(self) -> builtins.list[str]:
        return sorted(self._bucket(("", "namespaces")).get("", {}))

    # -- internals ----------------------------------------------------------------------------

    def _type_of(self, obj: Any) -> ResourceType:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"expected an object, got {type(obj).__name__}")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if not kind or not isinstance(kind, str):
            raise errors.bad_request("Object 'Kind' is missing")
        if not api_version or not isinstance(api_version, str):
            raise errors.bad_request(f"Object 'apiVersion' is missing in kind {kind!r}")
        rt = self.registry.by_kind(kind, api_version)
        if not rt.stored:
            raise errors.method_not_allowed(f"{rt.qualified} are not stored objects")
        return rt

    def _bucket(self, skey: tuple[str, str]) -> dict[str, dict[str, Obj]]:
        b = self._data.get(skey)
        if b is None:
            b = self._data[skey] = {}
        return b

    def _namespace_for(self, rt: ResourceType, meta: dict[str, Any]) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        ns = meta.get("namespace")
        if not ns:
            raise errors.bad_request(f"an empty namespace may not be set when a resource name is provided "
                                     f"({rt.kind} {meta.get('name', '')!r} has no metadata.namespace)")
        return str(ns)

    def _check_namespace_accepts(self, ns: str, rt: ResourceType, name: str) -> None:
        nso = self._bucket(("", "namespaces")).get("", {}).get(ns)
        if nso is None:
            raise errors.not_found("", "namespaces", ns)
        if nso["metadata"].get("deletionTimestamp") and rt.kind != "Event":
            raise errors.forbidden(
                f'{rt.plural} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated", rt.group, rt.plural, name)

    def _admit_service_account(self, pod: Obj, ns: str) -> None:
        """The ServiceAccount admission plugin (``admission.service_account_admission``): a pod naming an
        account the namespace lacks is forbidden — but ``default``, which the service-account controller
        makes. The token volume's suffix is drawn from the seed and the store's count of objects made,
        leaving the generated names' stream as it was."""
        spec = pod.get("spec")
        name = str((spec if isinstance(spec, dict) else {}).get("serviceAccountName") or "default")
        account = self._bucket(self.registry.by_kind("ServiceAccount").storage_key).get(ns, {}).get(name)
        if account is None and name != "default" and admission.MIRROR_POD_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
            pod_name = pod["metadata"].get("name", "")
            raise errors.forbidden(f'pods "{pod_name}" is forbidden: error looking up service account {ns}/{name}: '
                                   f'serviceaccount "{name}" not found', "", "pods", pod_name)
        admission.service_account_admission(pod, account, name_suffix("kube-api-access", self.seed, self._uid_counter))

    def _get_stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        ns = (namespace or "") if rt.namespaced else ""
        o = self._bucket(rt.storage_key).get(ns, {}).get(name)
        if o is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return o

    def _new_uid(self) -> str:
        self._uid_counter += 1
        digest = hashlib.sha256(f"uid:{self.seed}:{self._uid_counter}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def _random_suffix(self, n: int = 5) -> str:
        self._name_counter += 1
        digest = hashlib.sha256(f"name:{self.seed}:{self._name_counter}".encode()).digest()
        return "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:n])

    def _check_precondition(self, rt: ResourceType, old: Obj, rv: Any) -> None:
        if rv not in (None, "") and str(rv) != old["metadata"]["resourceVersion"]:
            raise errors.modified_conflict(rt.group, rt.plural, old["metadata"]["name"])

    def _merge_update(self, stype: ResourceType, old: Obj, incoming: Obj, subresource: str | None) -> Obj:
        if subresource == "status":
            new = dict(old)
            new["metadata"] = dict(old["metadata"])
            if "status" in incoming:
                new["status"] = incoming["status"]
            else:
                new.pop("status", None)
            return new
        if subresource not in (None, "", "scale"):
            raise errors.not_found_path()
        new = incoming
        meta = new["metadata"]
        old_meta = old["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        if "managedFields" not in meta and "managedFields" in old_meta:
            meta["managedFields"] = old_meta["managedFields"]
        if "status" in stype.subresources:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    def _commit_update(self, stype: ResourceType, old: Obj, new: Obj, *, dry_run: bool = False,
                       subresource: str | None = None) -> Obj:
        admission.default(stype, new, self._alloc)
        admission.validate(stype, new, old)
        meta = new["metadata"]
        if old["metadata"].get("deletionTimestamp") and len(meta.get("finalizers") or []) > len(
                old["metadata"].get("finalizers") or []):
            raise errors.forbidden(f'{stype.plural} "{meta["name"]}" is forbidden: no new finalizers can be added '
                                   "if the object is being deleted", stype.group, stype.plural, meta["name"])
        if admission.has_generation(stype, new) and admission.spec_changed(old, new):
            meta["generation"] = int(old["metadata"].get("generation", 0)) + 1
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if self.webhooks is not None:
            self.webhooks.admit("UPDATE", stype, new, old, subresource, dry_run)
        if _same(old, new):
            return old
        if dry_run:
            return new
        # Writes to an object on its way out (finalizers removed, a terminating pod's last status)
        # are part of its deletion, which a full store must still let through.
        self._write(stype, new, "MODIFIED", charge=not old["metadata"].get("deletionTimestamp"))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            graceful = stype.kind == "Pod" and stype.group == "" and meta.get("deletionGracePeriodSeconds", 0) > 0
            if not graceful:
                return self._remove(stype, new)
        if stype.kind == "CustomResourceDefinition" and stype.group == "apiextensions.k8s.io":
            self.registry.add_crd(new)
        return new

    def _write(self, stype: ResourceType, obj: Obj, event: str, *, charge: bool = True) -> None:
        """Store ``obj``; with ``charge`` a write that grows the store past its quota is refused
        (before anything changes) with etcd's error, as is any object over etcd's request limit."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if stype.namespaced else ""
        name = meta["name"]
        key: Key = (stype.storage_key, ns, name)
        value = len(json.dumps(obj, separators=(",", ":"), default=str))
        size = value + _key_cost(key)
        if charge:
            if value > MAX_REQUEST_BYTES:
                raise errors.request_too_large()
            pool = key[0] == EVENTS_STORAGE_KEY
            growth = size - self._sizes.get(key, 0)
            if growth > 0 and self._used[pool] + growth > (self.event_quota_bytes if pool else self.quota_bytes):
                raise errors.storage_full()
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        bucket = self._bucket(stype.storage_key)
        old = bucket.get(ns, {}).get(name)
        if old is not None:
            self._unindex(stype.storage_key, ns, old)
        bucket.setdefault(ns, {})[name] = obj
        self._index(stype.storage_key, ns, obj)
        self._charge(key, size)
        self._emit(event, stype.storage_key, ns, obj)

    def _charge(self, key: Key, size: int) -> None:
        """Record ``key``'s new storage size (0: removed) in the totals of its quota."""
        pool = key[0] == EVENTS_STORAGE_KEY
        self._used[pool] += size - self._sizes.pop(key, 0)
        if size:
            self._sizes[key] = size

    def _emit(self, event: str, skey: tuple[str, str], ns: str, obj: Obj) -> None:
        now = self.clock.now()
        log = self._log
        if len(log) == log.maxlen:
            self._log_floor = log[0].resource_version
        log.append(WatchEvent(self._rv, event, skey, ns, obj, now))
        while log[0].at < now - COMPACTION_INTERVAL_SECONDS:  # the newest change always stays
            self._log_floor = log.popleft().resource_version
        for fn in list(self._listeners):
            fn(event, obj)

    # ownerReference indexes: owner uid -> dependents; uid -> location
    def _rebuild_indexes(self) -> None:
        self._dependents: dict[str, set[Key]] = {}
        self._by_uid: dict[str, Key] = {}
        for skey, bucket in self._data.items():
            for ns, objs in bucket.items():
                for o in objs.values():
                    self._index(skey, ns, o)

    def _index(self, skey: tuple[str, str], ns: str, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (skey, ns, meta["name"])
        self._by_uid[meta["uid"]] = key
        for ref in meta.get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), set()).add(key)

    def _unindex(self, skey: tuple[str, str], ns: str, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (skey, ns, meta["name"])
        self._by_uid.pop(meta["uid"], None)
        for ref in meta.get("ownerReferences") or ():
            deps = self._dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self._dependents[ref.get("uid", "")]

    def _lookup(self, key: Key) -> Obj | None:
        skey, ns, name = key
        return self._data.get(skey, {}).get(ns, {}).get(name)

    def _stype_of(self, skey: tuple[str, str]) -> ResourceType:
        for t in self.registry.storage_types():
            if t.storage_key == skey:
                return t
        raise errors.internal(f"no storage type for {skey}")

    def _delete(self, stype: ResourceType, old: Obj, policy: str, grace: int | None) -> Obj:
        meta = old["metadata"]
        now = self.clock.now()
        if stype.kind == "Namespace" and stype.group == "":
            return self._terminate_namespace(stype, old)
        if stype.kind == "Pod" and stype.group == "":
            grace = self._pod_grace(old, grace)
        else:
            grace = 0
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and self._dependents.get(meta["uid"]) and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        if finalizers or grace > 0:
            if meta.get("deletionTimestamp") and grace >= meta.get("deletionGracePeriodSeconds", 0) \
                    and finalizers == (meta.get("finalizers") or []):
                return old  # already terminating with an equal or shorter grace period: nothing is written
            new = clone(old)
            nm = new["metadata"]
            if not nm.get("deletionTimestamp") or grace > 0:
                nm["deletionTimestamp"] = rfc3339(now + grace)
            nm["deletionGracePeriodSeconds"] = grace
            nm["finalizers"] = finalizers
            if not finalizers:
                nm.pop("finalizers")
            if admission.has_generation(stype, new):
                nm["generation"] = int(nm.get("generation", 0)) + 1
            self._write(stype, new, "MODIFIED", charge=False)
            if "foregroundDeletion" in finalizers:
                self._delete_dependents(nm["uid"], "Foreground")
                current = self._lookup((stype.storage_key, nm.get("namespace", "") if stype.namespaced else "", nm["name"]))
                if current is not None:
                    self._maybe_finish_foreground(current)
                    return self._lookup((stype.storage_key, nm.get("namespace", "") if stype.namespaced else "",
                                         nm["name"])) or current
            return new
        return self._remove(stype, old, cascade=policy)

    def _pod_grace(self, pod: Obj, grace: int | None) -> int:
        """Pods on a node terminate gracefully; unscheduled or finished pods go at once (as upstream)."""
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        return max(0, int(grace))

    def _remove(self, stype: ResourceType, obj: Obj, cascade: str = "Background") -> Obj:
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if stype.namespaced else ""
        bucket = self._bucket(stype.storage_key)
        objs = bucket.get(ns, {})
        current = objs.pop(meta["name"], None)
        if current is None:
            return obj
        if not objs:
            bucket.pop(ns, None)
        self._unindex(stype.storage_key, ns, current)
        self._charge((stype.storage_key, ns, meta["name"]), 0)
        self._rv += 1
        final = dict(current)
        final["metadata"] = dict(current["metadata"], resourceVersion=str(self._rv))
        self._emit("DELETED", stype.storage_key, ns, final)
        if stype.kind == "Service" and not stype.group:
            self._alloc.release(final)  # the allocators free a deleted Service's cluster IP and node ports
        if stype.kind == "CustomResourceDefinition" and stype.group == "apiextensions.k8s.io":
            self._drop_custom_resources(final)
        if cascade != "Orphan":
            self._delete_dependents(meta["uid"], "Background")
        self._after_removal(final)
        return final

    def _delete_dependents(self, owner_uid: str, policy: str) -> None:
        for key in sorted(self._dependents.get(owner_uid, set())):
            dep = self._lookup(key)
            if dep is None:
                continue
            others = [r for r in dep["metadata"].get("ownerReferences") or []
                      if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
            stype = self._stype_of(key[0])
            if others:
                new = clone(dep)
                new["metadata"]["ownerReferences"] = [
                    r for r in new["metadata"]["ownerReferences"] if r.get("uid") != owner_uid]
                self._write(stype, new, "MODIFIED", charge=False)
            elif not dep["metadata"].get("deletionTimestamp") or policy == "Foreground":
                self._delete(stype, dep, policy, None)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for key in sorted(self._dependents.get(owner_uid, set())):
            dep = self._lookup(key)
            if dep is None:
                continue
            new = clone(dep)
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self._write(self._stype_of(key[0]), new, "MODIFIED", charge=False)

    def _after_removal(self, removed: Obj) -> None:
        """Finish owners in foreground deletion and namespaces in termination once they are empty."""
        for ref in removed["metadata"].get("ownerReferences") or []:
            key = self._by_uid.get(ref.get("uid", ""))
            if key is not None:
                owner = self._lookup(key)
                if owner is not None:
                    self._maybe_finish_foreground(owner)
        ns = removed["metadata"].get("namespace")
        if ns:
            nso = self._bucket(("", "namespaces")).get("", {}).get(ns)
            if nso is not None and nso["metadata"].get("deletionTimestamp") and ns not in self._finishing:
                self._maybe_finish_namespace(nso)

    def _maybe_finish_foreground(self, owner: Obj) -> None:
        meta = owner["metadata"]
        if "foregroundDeletion" not in (meta.get("finalizers") or []) or not meta.get("deletionTimestamp"):
            return
        if self._dependents.get(meta["uid"]):
            return
        key = self._by_uid[meta["uid"]]
        stype = self._stype_of(key[0])
        new = clone(owner)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
            self._remove(stype, new)
        else:
            self._write(stype, new, "MODIFIED", charge=False)

    def _terminate_namespace(self, stype: ResourceType, old: Obj) -> Obj:
        name = old["metadata"]["name"]
        if name in ("default", "kube-system", "kube-public"):
            raise errors.forbidden(f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                                   "", "namespaces", name)
        if not old["metadata"].get("deletionTimestamp"):
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = rfc3339(self.clock.now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new.setdefault("status", {})["phase"] = "Terminating"
            self._write(stype, new, "MODIFIED", charge=False)
            for t in self.registry.storage_types():
                if t.namespaced:
                    for o in list(self._bucket(t.storage_key).get(name, {}).values()):
                        if not o["metadata"].get("deletionTimestamp"):
                            self._delete(t, o, "Background", None)
        current = self._bucket(("", "namespaces")).get("", {}).get(name)
        if current is None:
            return old
        return self._maybe_finish_namespace(current)

    def _maybe_finish_namespace(self, nso: Obj) -> Obj:
        """Remove a terminating namespace once only Events are left in it (they may still be
        written while it terminates); the namespace controller then deletes those too."""
        name = nso["metadata"]["name"]
        events: builtins.list[tuple[ResourceType, Obj]] = []
        for t in self.registry.storage_types():
            objs = self._data.get(t.storage_key, {}).get(name) if t.namespaced else None
            if not objs:
                continue
            if t.kind != "Event":
                return nso
            events += [(t, o) for o in list(objs.values())]
        self._finishing.add(name)
        try:
            for t, event in events:
                self._remove(t, event)
        finally:
            self._finishing.discard(name)
        return self._remove(self.registry.by_kind("Namespace", "v1"), nso)

    def _drop_custom_resources(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        for t in self.registry.storage_types():
            if t.custom and f"{t.plural}.{t.group}" == name:
                for ns in list(self._bucket(t.storage_key)):
                    for o in list(self._bucket(t.storage_key).get(ns, {}).values()):
                        self._remove(t, o)
                self._data.pop(t.storage_key, None)
        self.registry.remove_crd(name)

    def _apply_create(self, rt: ResourceType, ns: str | None, name: str, doc: Any, manager: str | None,
                      dry_run: bool, decode: Callable[[ResourceType, Obj], None] | None = None) -> Obj:
        from . import patch as patching

        if not isinstance(doc, dict):
            raise errors.bad_request("apply patch must be an object")
        if doc.get("kind") != rt.kind or doc.get("apiVersion") != rt.api_version:
            raise errors.bad_request(
                f"the body of the apply request must have kind {rt.kind!r} and apiVersion {rt.api_version!r}")
        obj = clone(doc)
        if decode is not None:
            decode(rt, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        patching.record_apply_manager(obj, doc, _manager(manager), rfc3339(self.clock.now()))
        return self.create(obj, dry_run=dry_run)


def _key_cost(key: Key) -> int:
    """What etcd's quota charges for a key besides the value: the key itself and ``kvOverhead``."""
    (group, plural), ns, name = key
    return len(group) + len(plural) + len(ns) + len(name) + 3 + KV_OVERHEAD


def _manager(field_manager: str | None) -> str:
    return field_manager or "unknown"


def _sets_resource_version(doc: Any, ptype: str) -> bool:
    if isinstance(doc, dict):
        return bool((doc.get("metadata") or {}).get("resourceVersion"))
    if isinstance(doc, list):  # JSON patch
        return any(isinstance(op, dict) and op.get("path") == "/metadata/resourceVersion" for op in doc)
    return False


def _same(old: Obj, new: Obj) -> bool:
    """Equal apart from resourceVersion and managedFields timestamps (a no-op write)."""
    if old.keys() != new.keys():
        return False
    for k, v in new.items():
        if k == "metadata":
            om, nm = old["metadata"], v
            if om.keys() != nm.keys():
                return False
            for mk, mv in nm.items():
                if mk in ("resourceVersion", "managedFields"):
                    continue
                if om[mk] != mv:
                    return False
        elif old[k] != v:
            return False
    return True
