"""Kubeconfig files the harness writes: one context, a bearer token, mode 0600 (both backends)."""

from __future__ import annotations

import base64
import functools
import os
from pathlib import Path

import yaml


def write_kubeconfig(path: str | os.PathLike[str], url: str, token: str, ca_pem: bytes | None,
                     namespace: str = "default", *, name: str = "itbench-gym", insecure: bool = False) -> Path:
    """Write a kubeconfig (mode 0600) that makes ``url`` the current context with ``token``
    (``insecure``: the server's certificate is not verified, as in the kubeconfig it came from)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_kubeconfig_text(url, token, ca_pem, namespace, name, insecure))
    return p


@functools.lru_cache(maxsize=64)
def _kubeconfig_text(url: str, token: str, ca_pem: bytes | None, namespace: str, name: str, insecure: bool) -> str:
    """The file's YAML (the twin writes the same two files at every reset: rendered once)."""
    cluster: dict[str, object] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    text: str = yaml.safe_dump(config, sort_keys=False)
    return text
