"""`validate.podSecurity`: the Kubernetes Pod Security Standards (baseline, restricted) with exclusions.

Each control reports violations as (control name, container image or None for pod-level fields). An
`exclude` entry naming a control drops it entirely, or, with `images`, only for matching containers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .images import pod_spec
from .values import wildcard_match

_BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
_APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"

Violation = tuple[str, str | None]


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("containers", "initContainers", "ephemeralContainers"):
        yield from (c for c in spec.get(key) or [] if isinstance(c, dict))


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _baseline(spec: dict[str, Any], meta: dict[str, Any]) -> Iterator[Violation]:
    pod_sc = _sc(spec)
    if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        yield "Host Namespaces", None
    if any("hostPath" in v for v in spec.get("volumes") or [] if isinstance(v, dict)):
        yield "HostPath Volumes", None
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(_APPARMOR_PREFIX) and not (value == "runtime/default" or str(value).startswith("localhost/")):
            yield "AppArmor", None
    if (pod_sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        yield "AppArmor", None
    if any(s.get("name") not in _SAFE_SYSCTLS for s in pod_sc.get("sysctls") or []):
        yield "Sysctls", None
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "Seccomp", None
    if _bad_selinux(pod_sc.get("seLinuxOptions")):
        yield "SELinux", None
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        yield "HostProcess", None
    for c in _containers(spec):
        image, sc = str(c.get("image", "")), _sc(c)
        if sc.get("privileged"):
            yield "Privileged Containers", image
        if any(cap not in _BASELINE_CAPS for cap in (sc.get("capabilities") or {}).get("add") or []):
            yield "Capabilities", image
        if any(p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, dict)):
            yield "Host Ports", image
        if sc.get("procMount") not in (None, "Default"):
            yield "/proc Mount Type", image
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield "Seccomp", image
        if _bad_selinux(sc.get("seLinuxOptions")):
            yield "SELinux", image
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield "HostProcess", image
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            yield "AppArmor", image


def _bad_selinux(options: Any) -> bool:
    if not isinstance(options, dict):
        return False
    return options.get("type", "") not in _SELINUX_TYPES or bool(options.get("user")) or bool(options.get("role"))


def _restricted(spec: dict[str, Any]) -> Iterator[Violation]:
    pod_sc = _sc(spec)
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and not any(k in _RESTRICTED_VOLUMES for k in volume if k != "name"):
            yield "Volume Types", None
    if pod_sc.get("runAsUser") == 0:
        yield "Running as Non-root user", None
    pod_non_root = pod_sc.get("runAsNonRoot")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        image, sc = str(c.get("image", "")), _sc(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            yield "Privilege Escalation", image
        non_root = sc.get("runAsNonRoot", pod_non_root)
        if non_root is not True or sc.get("runAsNonRoot") is False:
            yield "Running as Non-root", image
        if sc.get("runAsUser") == 0:
            yield "Running as Non-root user", image
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield "Seccomp", image
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or any(cap != "NET_BIND_SERVICE" for cap in caps.get("add") or []):
            yield "Capabilities", image


def _excluded(violation: Violation, excludes: list[dict[str, Any]]) -> bool:
    control, image = violation
    for ex in excludes:
        if ex.get("controlName") != control:
            continue
        images = ex.get("images")
        if not images:
            return True
        if image is not None and any(wildcard_match(str(p), image) for p in images):
            return True
    return False


def check_pod_security(settings: dict[str, Any], resource: dict[str, Any]) -> list[str]:
    """Violated control names (empty: the pod meets the level); non-pod resources have nothing to check."""
    spec = pod_spec(resource)
    if spec is None:
        return []
    kind = resource.get("kind")
    meta = (resource.get("metadata") if kind == "Pod" else (pod_template_meta(resource))) or {}
    violations = list(_baseline(spec, meta))
    if settings.get("level") == "restricted":
        violations += list(_restricted(spec))
    excludes = settings.get("exclude") or []
    return sorted({control for control, image in violations if not _excluded((control, image), excludes)})


def pod_template_meta(resource: dict[str, Any]) -> dict[str, Any]:
    spec = resource.get("spec") or {}
    template = (
        (spec.get("jobTemplate") or {}).get("spec", {}).get("template") if resource.get("kind") == "CronJob" else spec.get("template")
    )
    return (template or {}).get("metadata") or {}
