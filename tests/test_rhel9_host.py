"""The modelled RHEL 9 host: its data, its misconfigurations, and the real ansible-playbook reading it.

The evidence playbooks are what a CISO agent writes for ITBench's rhel9-opa scenarios; they run with
ansible-core in the rooted sandbox against a throwaway copy of the model.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from itbench_gym.backends.base import Endpoints
from itbench_gym.hosts.model import HostModel, HostModelError
from itbench_gym.hosts.root import materialise, remove_tree
from itbench_gym.paths import envs_dir
from itbench_gym.tools.ansible import INVENTORY_FILE, AnsiblePlaybookTool, run_playbook, run_playbook_text
from itbench_gym.tools.base import ToolContext, ToolInputError
from itbench_gym.tools.opa import eval_command
from itbench_gym.tools.sandbox import isolation_available

needs_sandbox = pytest.mark.skipif(not isolation_available(), reason="bubblewrap with user and network namespaces is not available here")

HOST = envs_dir() / "rhel9-host" / "host.yaml"

#: What an agent collects for CIS controls on RHEL 9: sshd, cron, sysctl, services, packages, SELinux.
EVIDENCE_PLAYBOOK = """\
- name: Collect CIS evidence from the RHEL 9 servers
  hosts: rhel9_servers
  gather_facts: true
  become: true
  tasks:
    - name: X11Forwarding in sshd_config
      ansible.builtin.shell: grep '^X11Forwarding' /etc/ssh/sshd_config || echo "X11Forwarding not set"
      register: x11
      changed_when: false
    - name: Permissions of /etc/crontab
      ansible.builtin.stat:
        path: /etc/crontab
      register: crontab
    - name: Effective sshd setting
      ansible.builtin.shell: sshd -T | grep -i '^x11forwarding'
      register: sshd_t
      changed_when: false
    - name: IPv4 forwarding
      ansible.builtin.command: sysctl -n net.ipv4.ip_forward
      register: ip_forward
      changed_when: false
    - name: auditd unit state
      ansible.builtin.shell: systemctl is-enabled auditd; systemctl is-active auditd
      register: auditd
      changed_when: false
      failed_when: false
    - name: aide package
      ansible.builtin.command: rpm -q aide
      register: aide
      changed_when: false
      failed_when: false
    - name: PASS_MAX_DAYS
      ansible.builtin.shell: awk '/^PASS_MAX_DAYS/ {print $2}' /etc/login.defs
      register: max_days
      changed_when: false
    - name: Kernel release
      ansible.builtin.command: uname -r
      register: kernel
      changed_when: false
    - name: SELinux mode
      ansible.builtin.command: getenforce
      register: selinux
      changed_when: false
    - name: Shadow file (root only)
      ansible.builtin.slurp:
        src: /etc/shadow
      register: shadow
    - name: Would X11Forwarding need fixing
      ansible.builtin.lineinfile:
        path: /etc/ssh/sshd_config
        regexp: '^X11Forwarding'
        line: X11Forwarding no
      check_mode: true
      register: x11_fix
    - ansible.builtin.service_facts:
    - ansible.builtin.package_facts:
        manager: auto
    - name: Save the evidence
      ansible.builtin.copy:
        dest: collected_data.json
        content: "{{ evidence | to_json }}"
      vars:
        evidence:
          file: /etc/ssh/sshd_config
          x11_forwarding: "{{ x11.stdout }}"
          sshd_t: "{{ sshd_t.stdout }}"
          crontab: {mode: "{{ crontab.stat.mode }}", uid: "{{ crontab.stat.uid }}", gid: "{{ crontab.stat.gid }}"}
          ip_forward: "{{ ip_forward.stdout }}"
          auditd: "{{ auditd.stdout_lines }}"
          auditd_service: "{{ ansible_facts.services.get('auditd.service') }}"
          aide_rc: "{{ aide.rc }}"
          aide_stdout: "{{ aide.stdout }}"
          aide_installed: "{{ 'aide' in ansible_facts.packages }}"
          openssh_server: "{{ ansible_facts.packages['openssh-server'][0] }}"
          pass_max_days: "{{ max_days.stdout }}"
          selinux: "{{ selinux.stdout }}"
          kernel: "{{ kernel.stdout }}"
          shadow_has_root: "{{ (shadow.content | b64decode).startswith('root:') }}"
          x11_fix_needed: "{{ x11_fix.changed }}"
          distribution: "{{ ansible_facts.distribution }}"
          major: "{{ ansible_facts.distribution_major_version }}"
          version: "{{ ansible_facts.distribution_version }}"
          family: "{{ ansible_facts.os_family }}"
          hostname: "{{ ansible_facts.hostname }}"
      delegate_to: localhost
"""

#: ITBench's example policy for CIS 5.2.12 (Rego v0 syntax, as its examples are).
POLICY = """package check

default result = false

result {
    input.x11_forwarding == "X11Forwarding no"
}
"""

MISCONFIGURED = [
    {"lineinfile": {"path": "/etc/ssh/sshd_config", "regexp": "^X11Forwarding", "line": "X11Forwarding yes"}},
    {"file": {"path": "/etc/crontab", "mode": "0644"}},
    {"sysctl": {"name": "net.ipv4.ip_forward", "value": 1, "file": "/etc/sysctl.d/60-netipv4_sysctl.conf"}},
    {"service": {"name": "auditd", "enabled": "disabled", "active": "inactive"}},
    {"package": {"name": "aide", "state": "absent"}},
]


@pytest.fixture(scope="module")
def model() -> HostModel:
    return HostModel.load(HOST)


def _context(workspace: Path) -> ToolContext:
    endpoints = Endpoints(kubeconfig=workspace / "no-kubeconfig", kube_cache_dir=workspace / ".kube-cache", prometheus=None)
    return ToolContext(endpoints=endpoints, advance=lambda _s: None, now=lambda: 0.0, time_left=lambda: 600.0,
                       workspace=workspace, scratch=workspace.parent)


# -- the model as data --------------------------------------------------------------------------

def test_the_baseline_is_a_cis_hardened_rhel_9_4(model: HostModel) -> None:
    assert 'VERSION_ID="9.4"' in model.read("/etc/os-release")
    assert model.read("/etc/redhat-release").startswith("Red Hat Enterprise Linux release 9.4")
    assert "X11Forwarding no" in model.read("/etc/ssh/sshd_config").splitlines()
    assert model.files["/etc/crontab"].mode == 0o600 and model.files["/etc/shadow"].mode == 0
    assert model.files["/etc/cron.d"].type == "directory" and model.files["/etc/cron.d"].mode == 0o700
    assert model.sysctl["net.ipv4.ip_forward"] == "0"
    assert model.services["sshd.service"].enabled == "enabled" and model.packages["openssh-server"].version == "8.7p1"
    assert {"root", "sshd", "chrony"} <= {u.name for u in model.users()}
    for required in ("/etc/login.defs", "/etc/security/pwquality.conf", "/etc/security/faillock.conf", "/etc/pam.d/system-auth",
                     "/etc/pam.d/password-auth", "/etc/audit/auditd.conf", "/etc/systemd/journald.conf", "/etc/sudoers",
                     "/etc/chrony.conf", "/etc/selinux/config", "/boot/grub2/grub.cfg", "/etc/fstab", "/etc/issue", "/etc/motd",
                     "/etc/at.allow", "/etc/cron.allow", "/etc/gshadow"):
        assert model.files[required].type == "file", required
    assert HostModel.from_dict(model.to_dict()).to_dict() == model.to_dict()


def test_schema_errors_name_the_file_and_the_field(tmp_path: Path) -> None:
    document = yaml.safe_load(HOST.read_text(encoding="utf-8"))
    document["files"][3]["mode"] = "999"
    document["services"][0]["enabled"] = "on"
    bad = tmp_path / "host.yaml"
    bad.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(HostModelError) as caught:
        HostModel.load(bad)
    message = str(caught.value)
    assert f"{bad}: files[3].mode" in message and f"{bad}: services[0].enabled" in message
    document = yaml.safe_load(HOST.read_text(encoding="utf-8"))
    document["files"].append({"path": "/etc/owned", "content": "", "owner": "nosuchuser"})
    with pytest.raises(HostModelError, match=r"/etc/owned: owner 'nosuchuser' is not a user in /etc/passwd"):
        HostModel.from_dict(document, "inline")


def test_changes_make_a_new_model_deterministically(model: HostModel) -> None:
    changed = model.apply(MISCONFIGURED)
    again = model.apply(MISCONFIGURED)
    assert changed.to_dict() == again.to_dict()
    assert "X11Forwarding no" in model.read("/etc/ssh/sshd_config").splitlines()  # the baseline is untouched
    lines = changed.read("/etc/ssh/sshd_config").splitlines()
    assert "X11Forwarding yes" in lines and "X11Forwarding no" not in lines
    assert len(lines) == len(model.read("/etc/ssh/sshd_config").splitlines())  # replaced in place
    assert changed.files["/etc/crontab"].mode == 0o644 and changed.sysctl["net.ipv4.ip_forward"] == "1"
    assert "net.ipv4.ip_forward = 1" in changed.read("/etc/sysctl.d/60-netipv4_sysctl.conf").splitlines()
    assert changed.services["auditd.service"].active == "inactive" and "aide" not in changed.packages
    more = model.apply([
        {"lineinfile": {"path": "/etc/ssh/sshd_config", "regexp": "^PermitRootLogin", "state": "absent"}},
        {"lineinfile": {"path": "/etc/ssh/sshd_config", "line": "PermitRootLogin yes", "insertbefore": "^Include"}},
        {"file": {"path": "/etc/cron.allow", "state": "absent"}},
        {"file": {"path": "/etc/cron.deny", "state": "file", "content": "", "mode": "0644"}},
        {"file": {"path": "/etc/shadow", "owner": "root", "group": "adm", "mode": "0640"}},
        {"package": {"name": "telnet-server", "state": "present", "version": "0.17", "release": "85.el9", "arch": "x86_64", "epoch": 1}},
    ])
    sshd = more.read("/etc/ssh/sshd_config").splitlines()
    assert sshd.index("PermitRootLogin yes") == sshd.index("Include /etc/ssh/sshd_config.d/*.conf") - 1
    assert not any(x.startswith("PermitRootLogin no") for x in sshd)
    assert "/etc/cron.allow" not in more.files and more.files["/etc/cron.deny"].mode == 0o644
    assert (more.files["/etc/shadow"].group, more.files["/etc/shadow"].mode) == ("adm", 0o640)
    assert more.packages["telnet-server"].nvra == "telnet-server-0.17-85.el9.x86_64"


@pytest.mark.parametrize(("changes", "message"), [
    ([{"lineinfile": {"path": "/etc/ssh/nope", "line": "x"}}], r"change 0 \(lineinfile /etc/ssh/nope\): /etc/ssh/nope does not exist"),
    ([{"lineinfile": {"path": "/etc/ssh/sshd_config", "regexp": "(", "line": "x"}}], r"change 0 .*invalid regular expression"),
    ([{"file": {"path": "/etc/crontab"}}, {"sysctl": {"name": "net.ipv4.no_such", "value": "1"}}],
     r"change 1 \(sysctl net.ipv4.no_such\): net.ipv4.no_such is not a kernel parameter"),
    ([{"service": {"name": "telnet.socket", "active": "active"}}], r"telnet.socket is not a unit of this host"),
    ([{"package": {"name": "telnet", "state": "absent"}}], r"package telnet is not installed"),
    ([{"file": {"path": "/etc/x", "owner": "ghost", "state": "file"}}], r"owner 'ghost' is not a user"),
    ([{"lineinfile": {"path": "/etc/motd"}}], r"changes: \[0\]\.lineinfile: 'line' is a required property"),
    ([{"chmod": {"path": "/etc/motd"}}], r"changes: \[0\]: Additional properties are not allowed"),
])
def test_bad_changes_are_refused_naming_the_change(model: HostModel, changes: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(HostModelError, match=message):
        model.apply(changes)


def test_the_materialised_tree_has_the_model_s_files_and_modes(model: HostModel, tmp_path: Path) -> None:
    tree = materialise(model.apply(MISCONFIGURED), tmp_path / "root")
    try:
        assert (tree / "etc/ssh/sshd_config").read_text(encoding="utf-8") == model.apply(MISCONFIGURED).read("/etc/ssh/sshd_config")
        assert stat.S_IMODE((tree / "etc/crontab").stat().st_mode) == 0o644
        assert stat.S_IMODE((tree / "etc/cron.daily").stat().st_mode) == 0o700
        assert stat.S_IMODE((tree / "etc/shadow").stat().st_mode) == 0
        assert (tree / "proc/sys/net/ipv4/ip_forward").read_text(encoding="utf-8") == "1\n"
        assert os.readlink(tree / "etc/systemd/system/multi-user.target.wants/sshd.service") == "/usr/lib/systemd/system/sshd.service"
        assert not (tree / "etc/systemd/system/multi-user.target.wants/auditd.service").exists()
        assert os.readlink(tree / "etc/systemd/system/rpcbind.service") == "/dev/null"
        assert (tree / "run/systemd/system").is_dir() and os.readlink(tree / "etc/system-release") == "redhat-release"
    finally:
        remove_tree(tree)
    assert not tree.exists()


# -- the real ansible-playbook on the model -------------------------------------------------------

def _evidence(model: HostModel, workspace: Path) -> dict[str, Any]:
    code, out, err = run_playbook_text(model, EVIDENCE_PLAYBOOK, workspace)
    assert code == 0, out + err
    assert "failed=0" in out and "unreachable=0" in out
    evidence: dict[str, Any] = json.loads((workspace / "collected_data.json").read_text(encoding="utf-8"))
    return evidence


def _verdict(workspace: Path) -> str:
    (workspace / "policy.rego").write_text(POLICY, encoding="utf-8")
    output, status = eval_command(workspace, ["--data", "policy.rego", "--input", "collected_data.json", "data.check.result",
                                              "--format", "raw", "--v0-compatible"])
    assert status == 0, output
    return output.strip()


@needs_sandbox
def test_an_evidence_playbook_reads_the_compliant_host(model: HostModel, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    evidence = _evidence(model, workspace)
    assert (evidence["distribution"], evidence["major"], evidence["version"], evidence["family"]) == ("RedHat", "9", "9.4", "RedHat")
    assert evidence["hostname"] == "rhel9-host" and evidence["kernel"] == "5.14.0-427.13.1.el9_4.x86_64"
    assert evidence["x11_forwarding"] == "X11Forwarding no" and evidence["x11_fix_needed"] is False
    assert evidence["sshd_t"] == "x11forwarding no"
    assert evidence["crontab"] == {"mode": "0600", "uid": 0, "gid": 0}
    assert evidence["ip_forward"] == "0" and evidence["pass_max_days"] == "365" and evidence["selinux"] == "Enforcing"
    assert evidence["auditd"] == ["enabled", "active"]
    assert evidence["auditd_service"] == {"name": "auditd.service", "state": "running", "status": "enabled", "source": "systemd"}
    assert evidence["aide_rc"] == 0 and evidence["aide_stdout"] == "aide-0.16-101.el9.x86_64" and evidence["aide_installed"] is True
    assert evidence["openssh_server"]["version"] == "8.7p1" and evidence["openssh_server"]["source"] == "rpm"
    assert evidence["shadow_has_root"] is True  # become: root reads a 0000 file, as on RHEL
    assert (workspace / INVENTORY_FILE).read_text(encoding="utf-8").count("[rhel9_servers]") == 1
    assert _verdict(workspace) == "true"


@needs_sandbox
def test_an_injected_misconfiguration_changes_the_evidence(model: HostModel, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    evidence = _evidence(model.apply(MISCONFIGURED), workspace)
    assert evidence["x11_forwarding"] == "X11Forwarding yes" and evidence["x11_fix_needed"] is True
    assert evidence["sshd_t"] == "x11forwarding yes"
    assert evidence["crontab"]["mode"] == "0644" and evidence["ip_forward"] == "1"
    assert evidence["auditd"] == ["disabled", "inactive"]
    assert evidence["auditd_service"]["state"] == "stopped" and evidence["auditd_service"]["status"] == "disabled"
    assert evidence["aide_rc"] == 1 and evidence["aide_stdout"] == "package aide is not installed"
    assert evidence["aide_installed"] is False
    assert _verdict(workspace) == "false"  # what ITBench's grader requires for a non-compliant host


@needs_sandbox
def test_the_agent_tool_runs_check_mode_with_tags_and_verbosity(model: HostModel, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "site.yml").write_text("""\
- hosts: rhel9_servers
  gather_facts: false
  tasks:
    - name: Disable X11 forwarding
      ansible.builtin.lineinfile: {path: /etc/ssh/sshd_config, regexp: '^X11Forwarding', line: X11Forwarding no}
      tags: [sshd]
    - name: Not selected
      ansible.builtin.command: systemctl is-active sshd
      tags: [other]
""", encoding="utf-8")
    tool = AnsiblePlaybookTool(lambda: model.apply(MISCONFIGURED[:1]))
    result = tool.run({"text": "ansible-playbook site.yml -i inventory.ansible.ini --check --diff -vv --tags sshd"}, _context(workspace))
    assert result.exit_status == 0, result.text
    assert "changed: [rhel9-host]" in result.text and "-X11Forwarding yes" in result.text and "+X11Forwarding no" in result.text
    assert "Not selected" not in result.text and result.data["exit_code"] == 0
    with pytest.raises(ToolInputError, match="outside your workspace|absolute paths"):
        tool.run({"text": "ansible-playbook /etc/passwd"}, _context(workspace))
    with pytest.raises(ToolInputError, match="no such file"):
        tool.run({"text": "ansible-playbook missing.yml"}, _context(workspace))
    assert "Usage: ansible-playbook" in tool.run({"text": "ansible-playbook --help"}, _context(workspace)).text


@needs_sandbox
def test_the_grader_path_runs_playbook_yml_with_the_inventory(model: HostModel, tmp_path: Path) -> None:
    (tmp_path / "playbook.yml").write_text("""\
- name: Collect /etc/ssh/sshd_config X11Forwarding setting
  hosts: rhel9_servers
  gather_facts: no
  tasks:
    - name: Extract X11Forwarding setting from /etc/ssh/sshd_config
      ansible.builtin.shell: grep '^X11Forwarding' /etc/ssh/sshd_config || echo "X11Forwarding not set"
      register: ssh_x11_forwarding
    - name: Save collected setting to JSON
      ansible.builtin.copy:
        content: |
          {
            "file": "/etc/ssh/sshd_config",
            "x11_forwarding": {{ ssh_x11_forwarding.stdout | to_json }}
          }
        dest: collected_data.json
      delegate_to: localhost
    - name: A report from a template next to the playbook
      ansible.builtin.template: {src: report.j2, dest: report.txt}
      delegate_to: localhost
""", encoding="utf-8")
    (tmp_path / "report.j2").write_text("{{ inventory_hostname }}: {{ ssh_x11_forwarding.stdout }}\n", encoding="utf-8")
    done = run_playbook(model.apply(MISCONFIGURED[:1]), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "report.txt").read_text(encoding="utf-8") == "rhel9-host: X11Forwarding yes\n"
    assert json.loads((tmp_path / "collected_data.json").read_text(encoding="utf-8"))["x11_forwarding"] == "X11Forwarding yes"
