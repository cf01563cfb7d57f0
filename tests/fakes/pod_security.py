"""The Pod Security Standards' checks, offline: a stand-in for the API server's Pod Security admission.

Written from the standard (kubernetes.io/docs/concepts/security/pod-security-standards,
the "Baseline" and "Restricted" tables), one function per control, each returning
what it finds wrong. Only what a pod spec can say is checked; the namespace's
``pod-security.kubernetes.io/*`` labels decide which level the real admission
enforces (deploy/k8s/namespace.yaml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)

Check = Callable[[dict[str, Any]], Iterator[str]]


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field) or []


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def _host_process(spec: dict[str, Any]) -> Iterator[str]:
    for owner in (spec, *_containers(spec)):
        if (_sc(owner).get("windowsOptions") or {}).get("hostProcess"):
            yield "HostProcess: windowsOptions.hostProcess must not be true"


def _host_namespaces(spec: dict[str, Any]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"Host Namespaces: {field} must not be true"


def _privileged(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _sc(c).get("privileged"):
            yield f"Privileged Containers: {c['name']} is privileged"


def _baseline_capabilities(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        extra = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            yield f"Capabilities: {c['name']} adds {sorted(extra)}"


def _host_path(spec: dict[str, Any]) -> Iterator[str]:
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            yield f"HostPath Volumes: {v['name']}"


def _host_ports(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                yield f"Host Ports: {c['name']} binds hostPort {p['hostPort']}"


def _apparmor(spec: dict[str, Any]) -> Iterator[str]:
    for owner in (spec, *_containers(spec)):
        kind = (_sc(owner).get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            yield f"AppArmor: profile type {kind}"


def _selinux(spec: dict[str, Any]) -> Iterator[str]:
    for owner in (spec, *_containers(spec)):
        options = _sc(owner).get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            yield f"SELinux: options {options}"


def _proc_mount(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _sc(c).get("procMount", "Default") != "Default":
            yield f"/proc Mount Type: {c['name']}"


def _seccomp_not_unconfined(spec: dict[str, Any]) -> Iterator[str]:
    for owner in (spec, *_containers(spec)):
        if (_sc(owner).get("seccompProfile") or {}).get("type") == "Unconfined":
            yield "Seccomp: Unconfined"


def _sysctls(spec: dict[str, Any]) -> Iterator[str]:
    for s in _sc(spec).get("sysctls") or []:
        if s["name"] not in SAFE_SYSCTLS:
            yield f"Sysctls: {s['name']}"


def _volume_types(spec: dict[str, Any]) -> Iterator[str]:
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            yield f"Volume Types: {v['name']} is {sorted(kinds)}"


def _privilege_escalation(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _sc(c).get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {c['name']} must set allowPrivilegeEscalation: false"


def _run_as_non_root(spec: dict[str, Any]) -> Iterator[str]:
    pod = _sc(spec).get("runAsNonRoot")
    for c in _containers(spec):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            yield f"Running as Non-root: {c['name']}"


def _run_as_user(spec: dict[str, Any]) -> Iterator[str]:
    for owner in (spec, *_containers(spec)):
        if _sc(owner).get("runAsUser") == 0:
            yield "Running as Non-root user: runAsUser 0"


def _seccomp_set(spec: dict[str, Any]) -> Iterator[str]:
    pod = (_sc(spec).get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        kind = (_sc(c).get("seccompProfile") or {}).get("type") or pod
        if kind not in ("RuntimeDefault", "Localhost"):
            yield f"Seccomp: {c['name']} has {kind}"


def _restricted_capabilities(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"Capabilities: {c['name']} must drop ALL"
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {c['name']} may add only NET_BIND_SERVICE"


BASELINE: tuple[Check, ...] = (
    _host_process,
    _host_namespaces,
    _privileged,
    _baseline_capabilities,
    _host_path,
    _host_ports,
    _apparmor,
    _selinux,
    _proc_mount,
    _seccomp_not_unconfined,
    _sysctls,
)
RESTRICTED: tuple[Check, ...] = (
    *BASELINE,
    _volume_types,
    _privilege_escalation,
    _run_as_non_root,
    _run_as_user,
    _seccomp_set,
    _restricted_capabilities,
)


def violations(pod_spec: dict[str, Any], level: tuple[Check, ...]) -> list[str]:
    """Every control of ``level`` (:data:`BASELINE` or :data:`RESTRICTED`) that ``pod_spec`` breaks."""
    return [problem for check in level for problem in check(pod_spec)]
