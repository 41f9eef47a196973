"""Check every reference of a scenario spec against its app's data in ``envs/<app>/``.

What is checked (each problem names the field path, what was found and what was expected, with a
did-you-mean when a close name exists):

- ``environment.app`` is a folder under ``envs/`` with an ``app.yaml``; ``environment.namespace`` is
  that app's namespace.
- Fault arguments, by the reference types the fault catalogue declares (``x-ref`` in
  ``faults/definitions/``): target objects (workloads, ConfigMaps, Services, Secrets, ...) exist in
  the app's manifests; objects a fault creates go into an existing namespace; containers exist in
  the workload's pod template (or in the pods a Chaos Mesh selector picks), and an env var a fault
  modifies is set once in that container's ``env``, a Service target port a fault re-points is one
  port's; feature flags and their
  variants are defined in the flagd ConfigMap, and flags of the app's flag ConfigMap have a behaviour
  in ``app.yaml``; Chaos Mesh selectors pick at least one of the app's pods.
- ``alerts.triggering``: each alert is a rule the cluster evaluates (``envs/<app>/alert-rules.yaml`` or a
  PrometheusRule of the app's manifests, e.g. kube-prometheus-stack's defaults), and at least one
  rule of that name can fire with the given labels (see :mod:`itbench_gym.spec.alertrules`).
- ``ground_truth``: group kinds exist (Kubernetes kinds, or CRD kinds the app installs), namespaces
  exist, an exact ``name`` names an object the cluster will have, and **every filter matches at
  least one object** of the group's kind and namespace — the manifests' objects, the children the
  controllers make (Pods, ReplicaSets, Endpoints, named as Kubernetes names them), the services of
  the behaviour model (``app.yaml`` ``services``: ITBench names telemetry services as ``Service``
  entities even where no Kubernetes Service exists) and the objects the faults create — using the grader's own matching (:meth:`Group.specificity`), so a filter that
  passes here is one the grader can match. Kinds of ITBench's topology that are not Kubernetes
  objects (``ServiceOperation``, ``Port``) cannot be enumerated from manifests: only their regular
  expressions are checked. Kinds compare case-insensitively (as the grader matches them), so
  ITBench's ``HttpChaos`` is Chaos Mesh's ``HTTPChaos``. ``ground_truth.alerts[].id`` names an
  alert rule.

Regex validity and group-id references of the ground truth are checked by
:func:`itbench_gym.evaluation.groundtruth.parse_ground_truth`, which the loader runs too.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from itbench_gym.evaluation.entities import KIND_SYNONYMS, EntityRef, canonical_kind
from itbench_gym.evaluation.groundtruth import Group, filter_problem
from itbench_gym.faults.catalogue import ArgRef, argument_refs, catalogue, created_objects, fault_args_problems
from itbench_gym.lang.selectors import SelectorError, chaos_label_selector
from itbench_gym.spec.alertrules import rule_mismatch
from itbench_gym.spec.appfacts import BUILTIN_NAMESPACES, GENERATED_SUFFIX, AlertRuleFact, AppFacts, KubeObject, load_app_facts
from itbench_gym.spec.autoscaling import AUTOSCALING_FILE, hpa_objects
from itbench_gym.spec.finops import budget_objects

Problem = tuple[str, str]

#: Kinds of ITBench's topology that are not Kubernetes API objects (no manifest lists them).
NON_OBJECT_KINDS = frozenset({"Port", "ServiceOperation"})


def check_references(doc: Mapping[str, Any], envs: Path) -> list[Problem]:
    """Every broken reference of a schema-valid scenario document, as (field path, message)."""
    env = doc["environment"]
    app = env["app"]
    app_dir = envs / app
    if not (app_dir / "app.yaml").is_file():
        apps = sorted(p.name for p in envs.iterdir() if (p / "app.yaml").is_file()) if envs.is_dir() else []
        return [("environment.app", f"no app {app!r}: {envs}/{app}/app.yaml does not exist{_suggest(app, apps)}; "
                                    f"apps: {', '.join(apps) or 'none'}")]
    facts = load_app_facts(app_dir)
    problems: list[Problem] = [("environment.app", p) for p in facts.problems]
    if facts.namespace and env["namespace"] != facts.namespace:
        problems.append(("environment.namespace", f"{env['namespace']!r}, but app {app!r} runs in namespace "
                                                  f"{facts.namespace!r} (envs/{app}/app.yaml namespace)"))
    checker = _Checker(facts)
    if autoscaled(env):
        problems += checker.add_autoscalers(app_dir)
    budgets = (doc.get("finops") or {}).get("budgets") or {}
    if budgets:
        checker.add_budget_alerts(env["namespace"], budgets)
    problems += checker.faults(doc["faults"])
    problems += checker.alerts(doc["alerts"]["triggering"])
    problems += checker.ground_truth(doc["ground_truth"])
    return problems


def autoscaled(environment: Mapping[str, Any]) -> bool:
    """Whether a scenario's ``environment`` installs the app with its autoscalers (ITBench's ``autoscaling.kubernetes.hpa``)."""
    return bool(((environment.get("autoscaling") or {}).get("kubernetes") or {}).get("hpa"))


def fault_reference_problems(faults: Sequence[Mapping[str, Any]], facts: AppFacts,
                             environment: Mapping[str, Any] | None = None) -> list[Problem]:
    """The broken references of a list of faults (each ``{"id", "args"}``) into one app's data, installed
    with the scenario's ``environment`` options."""
    checker = _Checker(facts)
    problems = checker.add_autoscalers(facts.directory) if autoscaled(environment or {}) else []
    return problems + checker.faults(faults)


class _Checker:
    """Reference checks against one app; remembers the objects earlier faults create."""

    def __init__(self, facts: AppFacts) -> None:
        self.facts = facts
        self.created: list[KubeObject] = []
        #: Alerting rules the scenario deploys besides the app's (a FinOps scenario's budget alerts).
        self.added_rules: list[AlertRuleFact] = []
        #: Whether the app is installed with its autoscalers (``environment.autoscaling.kubernetes.hpa``).
        self.autoscaling = False

    def faults(self, faults: Sequence[Mapping[str, Any]]) -> list[Problem]:
        """Each fault's argument references, in order (a fault sees the objects earlier ones create)."""
        problems: list[Problem] = []
        for i, fault in enumerate(faults):
            definition = catalogue().get(fault["id"])
            if definition is None or fault_args_problems(fault["id"], fault["args"]):
                continue  # reported by the schema check; references need well-formed arguments
            for ref in argument_refs(definition, fault["args"]):
                problems += [(f"faults[{i}].{path}", message) for path, message in self.check(ref, f"faults[{i}]")]
            for made in created_objects(definition, fault["args"]):
                self.created.append(KubeObject(made.kind, made.name, made.namespace, f"created by faults[{i}]"))
                if made.spawns:
                    self.created.append(KubeObject(made.spawns, f"{made.name}-{GENERATED_SUFFIX}", made.namespace,
                                                   f"spawned by {made.kind} {made.name}"))
        return problems

    def rules(self) -> list[AlertRuleFact]:
        return [*self.facts.rules, *self.added_rules]

    def rule_names(self) -> list[str]:
        return list(dict.fromkeys(r.alert for r in self.rules()))

    def add_budget_alerts(self, namespace: str, budgets: Mapping[str, float]) -> None:
        """The budget alerts ``finops.budgets`` deploys (``spec/finops.py``), and their PrometheusRule."""
        for obj in budget_objects(namespace, budgets, ("default", "agent")):
            meta = obj["metadata"]
            self.created.append(KubeObject(obj["kind"], meta["name"], meta["namespace"], "created by finops.budgets"))
            for group in (obj.get("spec") or {}).get("groups") or []:
                self.added_rules += [AlertRuleFact(r["alert"], group["name"], r["expr"], r.get("labels") or {}, "finops.budgets")
                                     for r in group["rules"]]

    # -- objects ---------------------------------------------------------------------------------
    def objects(self) -> list[KubeObject]:
        return [*self.facts.objects, *self.created]

    def namespaces(self) -> set[str]:
        return self.facts.namespaces()

    def add_autoscalers(self, app_dir: Path) -> list[Problem]:
        """The HorizontalPodAutoscalers the ``autoscaling.kubernetes.hpa`` install option creates."""
        bodies = [{**o.body, "metadata": {**(o.body.get("metadata") or {}), "namespace": o.namespace}}
                  for o in self.facts.objects if o.kind == "Deployment" and o.body]
        try:
            hpas = hpa_objects(app_dir, bodies, self.facts.namespace or "")
        except ValueError as e:
            return [("environment.autoscaling.kubernetes.hpa", str(e))]
        self.created += [KubeObject("HorizontalPodAutoscaler", h["metadata"]["name"], h["metadata"]["namespace"],
                                    f"created by environment.autoscaling ({AUTOSCALING_FILE})", body=h) for h in hpas]
        self.autoscaling = True
        return []

    def find(self, kind: str, namespace: str | None, name: str) -> KubeObject | None:
        for o in self.objects():
            if o.kind == kind and o.name == name and (o.namespace is None or o.namespace == namespace):
                return o
        return None

    def check(self, ref: ArgRef, owner: str) -> list[Problem]:
        handler = {
            "object": self._object,
            "container": self._container,
            "flag": self._flag,
            "flag-variant": self._flag_variant,
            "pod-selector": self._pod_selector,
            "env-var": self._env_var,
            "service-port": self._service_port,
        }[ref.type]
        return handler(ref, owner)

    def _object(self, ref: ArgRef, owner: str) -> list[Problem]:
        value: Mapping[str, Any] = ref.value if isinstance(ref.value, Mapping) else {}
        raw_meta = value.get("metadata")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        kind, name, namespace = value.get("kind"), meta.get("name"), meta.get("namespace")
        if not isinstance(kind, str) or not isinstance(name, str) or not isinstance(namespace, (str, type(None))):
            return [(ref.path, "an object reference needs kind, metadata.name and (for namespaced kinds) metadata.namespace strings")]
        if ref.params.get("creates"):
            if namespace is not None and namespace not in self.namespaces():
                return [self._no_namespace(f"{ref.path}.metadata.namespace", namespace)]
            self.created.append(KubeObject(kind, name, namespace, f"created by {owner}"))
            spawns = ref.params.get("spawns")
            if isinstance(spawns, str):
                self.created.append(KubeObject(spawns, f"{name}-{GENERATED_SUFFIX}", namespace, f"spawned by {kind} {name}"))
            return []
        if self.find(kind, namespace, name) is not None:
            if ref.params.get("autoscaled") and not self._autoscaler_of(kind, namespace, name):
                return [(ref.path, self._not_autoscaled(kind, namespace, name))]
            beside = ref.params.get("also_creates")
            if isinstance(beside, Mapping):
                self.created.append(KubeObject(str(beside["kind"]), f"{name}{beside['suffix']}", namespace,
                                               f"created by {owner} beside {kind} {name}"))
            return []
        if namespace is not None and namespace not in self.namespaces():
            return [self._no_namespace(f"{ref.path}.metadata.namespace", namespace)]
        return [(f"{ref.path}.metadata.name", self._missing(kind, namespace, name))]

    def _autoscaled(self, namespace: str | None) -> list[tuple[str, str]]:
        """The (kind, name) of each workload a HorizontalPodAutoscaler of ``namespace`` targets."""
        out = []
        for o in self.objects():
            target = (o.body.get("spec") or {}).get("scaleTargetRef") or {}
            if o.kind == "HorizontalPodAutoscaler" and o.namespace == namespace and target:
                out.append((str(target.get("kind")), str(target.get("name"))))
        return out

    def _autoscaler_of(self, kind: str, namespace: str | None, name: str) -> bool:
        return (kind, name) in self._autoscaled(namespace)

    def _not_autoscaled(self, kind: str, namespace: str | None, name: str) -> str:
        text = f"no HorizontalPodAutoscaler targets {kind} {namespace}/{name}"
        if not self.autoscaling:
            return text + ("; the app's autoscalers come with the install option autoscaling.kubernetes.hpa "
                           "(environment.autoscaling of a scenario, ITBench's application args), which is not set")
        app = self.facts.name
        return (text + f"; envs/{app}/{AUTOSCALING_FILE} leaves it out"
                + _listing(f"{kind}s with one", sorted(n for k, n in self._autoscaled(namespace) if k == kind)))

    def _missing(self, kind: str, namespace: str | None, name: str) -> str:
        same = sorted({o.name for o in self.objects() if o.kind == kind and o.namespace == namespace})
        elsewhere = sorted({str(o.namespace) for o in self.objects() if o.kind == kind and o.name == name})
        text = f"no {kind} {name!r} in namespace {namespace!r} of app {self.facts.name!r}"
        if elsewhere:
            text += f" (there is one in namespace {', '.join(elsewhere)})"
        return text + _suggest(name, same) + _listing(f"{kind}s there", same)

    def _no_namespace(self, path: str, namespace: str) -> Problem:
        known = sorted(self.namespaces())
        return path, f"namespace {namespace!r} does not exist in app {self.facts.name!r}{_suggest(namespace, known)}; namespaces: {', '.join(known)}"

    # -- containers ------------------------------------------------------------------------------
    def _container(self, ref: ArgRef, owner: str) -> list[Problem]:
        names = [ref.value] if isinstance(ref.value, str) else list(ref.value or [])
        workload, selector = ref.params.get("workload"), ref.params.get("selector")
        if isinstance(workload, Mapping):
            meta = workload.get("metadata") or {}
            obj = self.find(str(workload.get("kind")), meta.get("namespace"), str(meta.get("name")))
            if obj is None:
                return []  # the workload reference itself is reported
            available, where = obj.containers(), f"the pod template of {obj}"
        elif isinstance(selector, Mapping):
            pods = self._selected(selector, ref.params.get("namespace"))
            if not pods:
                return []  # the selector is reported, or picks pods the app does not describe
            available = sorted({c for p in pods for c in p.containers()})
            owners = sorted({f"{p.owner[0]} {p.namespace}/{p.owner[1]}" for p in pods if p.owner})
            where = f"the pods the selector picks ({', '.join(owners)})"
        else:
            return []
        problems = []
        for j, name in enumerate(names):
            if name not in available:
                path = ref.path if isinstance(ref.value, str) else f"{ref.path}[{j}]"
                problems.append((path, f"no container {name!r} in {where}{_suggest(name, available)}; containers: {', '.join(available)}"))
        return problems

    def _env_var(self, ref: ArgRef, owner: str) -> list[Problem]:
        """An env var the fault overwrites: set exactly once in the container's ``env`` (ITBench's check)."""
        workload, container = ref.params.get("workload"), ref.params.get("container")
        meta = workload.get("metadata") or {} if isinstance(workload, Mapping) else {}
        obj = self.find(str((workload or {}).get("kind")), meta.get("namespace"), str(meta.get("name"))) if meta else None
        if obj is None or container not in obj.containers():
            return []  # the workload or the container reference itself is reported
        names = obj.env_names(container)
        count = names.count(str(ref.value))
        if count == 1:
            return []
        where = f"container {container!r} of {obj}"
        if count == 0:
            return [(ref.path, f"{where} has no env var {ref.value!r} to modify{_suggest(str(ref.value), names)}; "
                               f"its env: {', '.join(names) or 'none'}")]
        return [(ref.path, f"{where} sets env var {ref.value!r} {count} times; the fault modifies one that is set once")]

    def _service_port(self, ref: ArgRef, owner: str) -> list[Problem]:
        """A target port of a Service: exactly one of its ports forwards there (what the fault re-points)."""
        service = ref.params.get("service")
        meta = service.get("metadata") or {} if isinstance(service, Mapping) else {}
        obj = self.find("Service", meta.get("namespace"), str(meta.get("name"))) if meta else None
        if obj is None:
            return []  # the Service reference itself is reported
        targets = obj.target_ports()
        count = targets.count(ref.value)
        if count == 1:
            return []
        listed = ", ".join(str(t) for t in targets) or "none"
        if count == 0:
            return [(ref.path, f"{obj} has no port with targetPort {ref.value!r}; its target ports: {listed}")]
        return [(ref.path, f"{obj} has {count} ports with targetPort {ref.value!r}; the fault re-points one (target ports: {listed})")]

    # -- feature flags ---------------------------------------------------------------------------
    def _flag_config(self, config_map: Any) -> tuple[KubeObject | None, dict[str, Any] | None, str | None]:
        """(ConfigMap, its flags, problem) for a ConfigMap reference; all None when it does not exist."""
        if not isinstance(config_map, Mapping):
            return None, None, None
        meta = config_map.get("metadata") or {}
        obj = self.find("ConfigMap", meta.get("namespace"), str(meta.get("name")))
        if obj is None:
            return None, None, None
        flags = self.facts.flags
        app_file = f"envs/{self.facts.directory.name}/app.yaml"
        if flags is None:
            return obj, None, f"app {self.facts.name!r} defines no feature flags ({app_file} has no flags section)"
        raw = (obj.body.get("data") or {}).get(flags.key)
        if raw is None:
            return obj, None, f"{obj} has no key {flags.key!r} ({app_file} flags.key), so it holds no flags"
        try:
            defined = json.loads(raw).get("flags")
        except (ValueError, AttributeError):
            defined = None
        if not isinstance(defined, dict):
            return obj, None, f"{obj} key {flags.key!r} is not flagd JSON with a 'flags' object ({obj.origin})"
        return obj, defined, None

    def _flag(self, ref: ArgRef, owner: str) -> list[Problem]:
        obj, defined, problem = self._flag_config(ref.params.get("config_map"))
        if problem is not None:
            return [(ref.path, problem)]
        if obj is None or defined is None:
            return []
        name, flags = ref.value, self.facts.flags
        assert flags is not None
        if name not in defined:
            canonical = flags.canonical(name)
            if canonical is not None and canonical != name:
                hint = f"; {name!r} is an alias of {canonical!r} (envs/{self.facts.directory.name}/app.yaml): use {canonical!r}"
            else:
                hint = _suggest(name, defined)
            return [(ref.path, f"flag {name!r} is not defined in {obj} ({flags.key}){hint}; flags: {', '.join(sorted(defined))}")]
        if obj.name == flags.config_map and flags.canonical(name) is None:
            return [(ref.path, f"flag {name!r} has no behaviour in envs/{self.facts.directory.name}/app.yaml "
                               f"flags.definitions: the twin would not react to it")]
        return []

    def _flag_variant(self, ref: ArgRef, owner: str) -> list[Problem]:
        obj, defined, _ = self._flag_config(ref.params.get("config_map"))
        flag = ref.params.get("flag")
        if obj is None or defined is None or not isinstance(flag, str) or not isinstance(defined.get(flag), Mapping):
            return []
        variants = sorted(str(v) for v in (defined[flag].get("variants") or {}))
        if ref.value not in variants:
            return [(ref.path, f"flag {flag!r} has no variant {ref.value!r}{_suggest(ref.value, variants)}; variants: {', '.join(variants)}")]
        return []

    # -- Chaos Mesh selectors --------------------------------------------------------------------
    def _selected(self, selector: Mapping[str, Any], default_namespace: Any) -> list[KubeObject]:
        namespaces = selector.get("namespaces") or ([default_namespace] if default_namespace else [])
        pods = [p for p in self.facts.pods() if p.namespace in namespaces]
        return [p for p in pods if selector_matches(selector, p) is True]

    def _pod_selector(self, ref: ArgRef, owner: str) -> list[Problem]:
        selector, default = ref.value, ref.params.get("namespace")
        problems: list[Problem] = []
        listed = selector.get("namespaces")
        for j, ns in enumerate(listed or []):
            if ns not in self.namespaces():
                problems.append(self._no_namespace(f"{ref.path}.namespaces[{j}]", ns))
        for ns in selector.get("pods") or {}:
            if ns not in self.namespaces():
                problems.append(self._no_namespace(f"{ref.path}.pods.{ns}", ns))
        if problems or selector.get("pods"):
            return problems  # explicit pod names are generated at runtime: not checkable here
        namespaces = listed or ([default] if default else [])
        with_pods = {p.namespace for p in self.facts.pods()}
        checked = [ns for ns in namespaces if ns in with_pods]
        if not checked:
            if any(ns in BUILTIN_NAMESPACES for ns in namespaces):
                return []  # Kubernetes' own namespaces: the app's manifests do not describe their pods
            which = "the experiment's own namespace (the selector names no namespaces)" if not listed else "namespace"
            return [(ref.path, f"selects pods in {which} {', '.join(map(repr, namespaces))}, where app "
                               f"{self.facts.name!r} has no pods; add namespaces: [{', '.join(sorted(map(str, with_pods)))}]")]
        candidates = [p for p in self.facts.pods() if p.namespace in checked]
        verdicts = [selector_matches(selector, p) for p in candidates]
        for verdict in verdicts:
            if isinstance(verdict, str):
                return [(ref.path, verdict)]
        if any(verdicts):
            return []
        return [(ref.path, _no_pod_message(selector, candidates, checked, self.facts.name))]

    # -- alerts ----------------------------------------------------------------------------------
    def alerts(self, triggering: Sequence[Mapping[str, Any]]) -> list[Problem]:
        facts = self.facts
        rules_file = f"envs/{facts.directory.name}/alert-rules.yaml"
        if not facts.rules_file.exists():
            return [("alerts.triggering", f"app {facts.name!r} has no alert rules: {rules_file} does not exist")]
        rules_file = _rule_sources(facts.directory.name)
        names = self.rule_names()
        problems: list[Problem] = []
        for i, alert in enumerate(triggering):
            name = alert["alertname"]
            rules = [r for r in self.rules() if r.alert == name]
            if not rules:
                problems.append((f"alerts.triggering[{i}].alertname", f"no alerting rule {name!r} in {rules_file}"
                                                                      f"{_suggest(name, names)}; alerts: {', '.join(names)}"))
                continue
            labels = dict(alert.get("labels") or {})
            reasons = [(r, rule_mismatch(r, labels)) for r in rules]
            if all(reason is not None for _, reason in reasons):
                why = "; ".join(f"the rule in group {r.group!r} ({r.where}): {reason}" for r, reason in reasons)
                shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                problems.append((f"alerts.triggering[{i}].labels", f"no {name} rule in {rules_file} can fire with "
                                                                   f"{{{shown}}}: {why}"))
        return problems

    # -- ground truth ----------------------------------------------------------------------------
    def ground_truth(self, gt: Mapping[str, Any]) -> list[Problem]:
        problems: list[Problem] = []
        objects = [*self.objects(), *self.facts.app_services]
        kinds = self.facts.kinds() | {o.kind for o in self.created} | set(KIND_SYNONYMS.values())
        namespaces = self.namespaces() | {str(o.namespace) for o in self.created if o.namespace}
        for i, group in enumerate(gt.get("groups") or []):
            path = f"ground_truth.groups[{i}]"
            if not isinstance(group, Mapping) or not isinstance(group.get("kind"), str):
                continue
            kind = _known_kind(canonical_kind(group["kind"]), kinds)
            if kind is None:
                problems.append((f"{path}.kind", f"unknown kind {group['kind']!r}{_suggest(group['kind'], kinds)}"))
                continue
            ns = group.get("namespace")
            if isinstance(ns, str) and ns not in namespaces:
                problems.append((f"{path}.namespace", f"namespace {ns!r} does not exist in app {self.facts.name!r}"
                                                      f"{_suggest(ns, namespaces)}; namespaces: {', '.join(sorted(namespaces))}"))
                continue
            if kind in NON_OBJECT_KINDS:
                continue
            ns = ns if isinstance(ns, str) else None
            pool = [o for o in objects if o.kind == kind and (ns is None or o.namespace in (None, ns))]
            problems += self._group_names(path, group, kind, ns, pool)
        for i, alert in enumerate(gt.get("alerts") or []):
            name = alert.get("id") if isinstance(alert, Mapping) else None
            names = self.rule_names()
            if isinstance(name, str) and self.facts.rules_file.exists() and name not in names:
                problems.append((f"ground_truth.alerts[{i}].id", f"no alerting rule {name!r} in "
                                                                f"{_rule_sources(self.facts.directory.name)}{_suggest(name, names)}"))
        return problems

    def _group_names(self, path: str, group: Mapping[str, Any], kind: str, ns: str | None,
                     pool: list[KubeObject]) -> list[Problem]:
        names = sorted({o.name for o in pool})
        # Pods are listed by the workload that makes them: their own names are generated.
        listing = ("pods of", sorted({o.owner[1] for o in pool if o.owner})) if kind == "Pod" else ("names", names)
        where = f"{kind} in namespace {ns!r}" if ns else kind
        problems: list[Problem] = []
        name = group.get("name")
        if isinstance(name, str) and name.lower() not in {n.lower() for n in names}:
            hint = ""
            if kind == "Pod":
                hint = f"; pod names are generated, use a filter such as '{_workload_part(name)}-.*'"
            problems.append((f"{path}.name", f"no {where} named {name!r} in app {self.facts.name!r}"
                                             f"{_suggest(name, names)}{hint}{_listing(*listing)}"))
        for j, pattern in enumerate(group.get("filter") or []):
            if not isinstance(pattern, str) or filter_problem(pattern) is not None:
                continue  # an invalid regex is reported by the ground-truth parser
            probe = Group(id=str(group.get("id")), kind=kind, namespace=ns, filters=(pattern,))
            if not any(probe.specificity(EntityRef(o.name, o.kind, o.namespace)) is not None for o in pool):
                literal = re.split(r"[\\.^$*+?{}\[\]|()]", pattern, maxsplit=1)[0]
                shown = sorted({o.owner[1] if o.owner else o.name for o in pool})
                problems.append((f"{path}.filter[{j}]", f"{pattern!r} matches no {where} of app {self.facts.name!r}"
                                                        f"{_suggest(literal, shown)}{_listing(*listing)}"))
        return problems


def _known_kind(kind: str, kinds: set[str]) -> str | None:
    """``kind`` as the app spells it; kinds compare case-insensitively, as the grader matches them."""
    if kind in kinds:
        return kind
    return next((k for k in sorted(kinds) if k.lower() == kind.lower()), None)


def selector_matches(selector: Mapping[str, Any], pod: KubeObject) -> bool | str:
    """Whether a Chaos Mesh selector's static criteria (labels, expressions, annotations) pick ``pod``.

    Runtime criteria (pod phase, node, field selectors) cannot be known from manifests and are not
    applied. A selector that cannot be interpreted gives the reason instead.
    """
    try:
        matcher = chaos_label_selector(selector)
    except SelectorError as exc:
        return f"invalid selector: {exc}"
    if not matcher.matches(pod.labels):
        return False
    annotations = (pod.body.get("metadata") or {}).get("annotations") or {}
    return all(annotations.get(k) == v for k, v in (selector.get("annotationSelectors") or {}).items())


def _no_pod_message(selector: Mapping[str, Any], candidates: list[KubeObject], namespaces: list[str], app: str) -> str:
    wanted = selector.get("labelSelectors") or {}
    where = ", ".join(namespaces)
    for key, value in wanted.items():
        values = sorted({str(p.labels[key]) for p in candidates if key in p.labels})
        if not values:
            return f"selects no pod of app {app!r}: no pod in namespace {where} has a label {key!r}"
        if str(value) not in values:
            return (f"selects no pod of app {app!r}: no pod in namespace {where} has {key}={value!r}"
                    f"{_suggest(str(value), values)}; values: {', '.join(values)}")
    return f"selects no pod of app {app!r} in namespace {where}: no pod template matches all of its criteria"


def _workload_part(name: str) -> str:
    parts = name.split("-")
    return "-".join(parts[:-2]) if len(parts) > 2 else parts[0]


def _suggest(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(set(options)), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _listing(label: str, items: Sequence[str], limit: int = 12) -> str:
    if not items:
        return ""
    shown = ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")
    return f"; {label}: {shown}"


def _rule_sources(app: str) -> str:
    """Where the rules a scenario's alerts must come from: the app's rules and its manifests' PrometheusRules."""
    return f"envs/{app}/alert-rules.yaml or the PrometheusRules of its manifests"
