"""Modelled hosts (the RHEL 9 server of the CISO rhel9-opa scenarios) as data: ``envs/<host>/host.yaml``.

``HostModel.load(path)`` validates a model, ``model.apply(changes)`` returns a misconfigured copy, and
``hosts.root.materialise`` writes it as the directory tree the sandbox shows; running a playbook on a
model is ``itbench_gym.tools.ansible.run_playbook`` / ``run_playbook_text``.
"""

from itbench_gym.hosts.model import FileEntry, HostModel, HostModelError, Package, Service

__all__ = ["FileEntry", "HostModel", "HostModelError", "Package", "Service"]
