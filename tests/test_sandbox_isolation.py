"""Agent-written playbooks and fetch scripts cannot touch this machine or the network.

Each attempt is made the way an agent would (an ansible task, a line of a shell script) and is checked
from outside: files outside the workspace are unchanged, a listening socket saw no connection. The one
way out that exists — the relay from a fetch script's kubectl to the Kubernetes API — reaches a served
twin and nothing else. Without the sandbox, nothing runs.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from conftest import served_twin
from itbench_gym.backends.base import Endpoints
from itbench_gym.hosts.model import HostModel
from itbench_gym.hosts.root import materialise, remove_tree
from itbench_gym.paths import envs_dir
from itbench_gym.tools.ansible import AnsiblePlaybookTool, run_playbook, run_playbook_text
from itbench_gym.tools.base import ToolContext
from itbench_gym.tools.sandbox import SANDBOX_ENV, RootLayout, SandboxUnavailable, isolation_available, run_rooted
from itbench_gym.tools.script import BashScriptTool, run_script

#: The project's own sources: a path outside the sandbox that the probe must not see.
PROJECT_SRC = Path(__file__).resolve().parents[1] / "src"
needs_sandbox = pytest.mark.skipif(not isolation_available(), reason="bubblewrap with user and network namespaces is not available here")


class Listener:
    """A TCP server on this machine's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nleaked")
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def model() -> HostModel:
    return HostModel.load(envs_dir() / "rhel9-host")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _context(workspace: Path, endpoints: Endpoints | None = None) -> ToolContext:
    endpoints = endpoints or Endpoints(kubeconfig=workspace / "none", kube_cache_dir=workspace.parent / "cache", prometheus=None)
    return ToolContext(endpoints=endpoints, advance=lambda _s: None, now=lambda: 1_767_225_600.0, time_left=lambda: 600.0,
                       workspace=workspace, scratch=workspace.parent)


# -- playbooks -----------------------------------------------------------------------------------

@needs_sandbox
def test_a_playbook_cannot_write_outside_the_workspace_or_reach_the_network(model: HostModel, tmp_path: Path,
                                                                              listener: Listener) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("original", encoding="utf-8")
    real_etc = {p: _digest(Path(p)) for p in ("/etc/passwd", "/etc/hostname") if Path(p).is_file()}
    playbook = f"""\
- hosts: rhel9_servers
  gather_facts: false
  become: true
  tasks:
    - name: Write into the test's folder outside the workspace
      ansible.builtin.copy: {{content: pwned, dest: {outside}/pwned.txt}}
      delegate_to: localhost
      register: outside_copy
      ignore_errors: true
    - name: Overwrite a file there
      ansible.builtin.copy: {{content: pwned, dest: {outside}/keep.txt}}
      register: outside_overwrite
      ignore_errors: true
    - name: Write the real machine's /etc
      ansible.builtin.copy: {{content: "pwned:x:0:0::/:/bin/sh\\n", dest: /etc/passwd}}
      delegate_to: localhost
      register: etc_copy
      ignore_errors: true
    - name: Write /usr
      ansible.builtin.shell: echo pwned > /usr/bin/itbench-pwned
      register: usr_write
      ignore_errors: true
    - name: Reach an external address
      ansible.builtin.uri: {{url: "http://93.184.216.34/", timeout: 3}}
      register: external_uri
      ignore_errors: true
    - name: Download from the Internet
      ansible.builtin.get_url: {{url: "https://example.com/index.html", dest: downloaded.html, timeout: 3}}
      register: download
      ignore_errors: true
    - name: curl from a task
      ansible.builtin.shell: curl -sS -m 3 http://93.184.216.34/ || wget -q -T 3 -O- http://93.184.216.34/
      register: curl
      ignore_errors: true
    - name: A server on this machine's loopback
      ansible.builtin.uri: {{url: "http://127.0.0.1:{listener.port}/", timeout: 3}}
      register: loopback
      ignore_errors: true
    - name: Devices
      ansible.builtin.command: ls /dev
      register: devices
    - name: Results
      ansible.builtin.copy:
        dest: results.json
        content: "{{{{ {{'outside_copy': outside_copy.failed, 'outside_overwrite': outside_overwrite.failed,
                      'etc_copy': etc_copy.failed, 'usr_write': usr_write.failed, 'external_uri': external_uri.failed,
                      'download': download.failed, 'curl': curl.failed, 'loopback': loopback.failed,
                      'devices': devices.stdout_lines}} | to_json }}}}"
      delegate_to: localhost
"""
    workspace = tmp_path / "ws"
    code, out, err = run_playbook_text(model, playbook, workspace)
    assert code == 0, out + err
    results: dict[str, Any] = json.loads((workspace / "results.json").read_text(encoding="utf-8"))
    # Inside, /etc and the test's folder are the sandbox's own (a throwaway copy, a tmpfs): the copies
    # may "succeed" there, but nothing reaches this machine. /usr is read-only.
    assert results["usr_write"] is True
    assert results["external_uri"] and results["download"] and results["curl"] and results["loopback"]
    assert sorted(d for d in results["devices"] if d not in ("fd", "shm", "stdin", "stdout", "stderr")) == ["null", "urandom", "zero"]
    assert not (outside / "pwned.txt").exists() and (outside / "keep.txt").read_text(encoding="utf-8") == "original"
    assert all(_digest(Path(p)) == digest for p, digest in real_etc.items())
    assert not Path("/usr/bin/itbench-pwned").exists() and not (workspace / "downloaded.html").exists()
    assert listener.accepted == 0


@needs_sandbox
def test_the_rooted_sandbox_is_a_fresh_root(model: HostModel, tmp_path: Path, listener: Listener) -> None:
    tree = materialise(model, tmp_path / "root")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    probe = f"""
import json, os, socket
print(os.getuid(), socket.gethostname(), open('/proc/sys/net/ipv4/ip_forward').read().strip())
print(json.dumps(sorted(os.listdir('/'))))
print(os.path.exists({str(tmp_path / 'root')!r}), os.path.exists({str(PROJECT_SRC)!r}), os.path.exists({str(Path.home() / '.cache')!r}))
try:
    socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)
    print('connected')
except OSError as exc:
    print('refused', exc.errno)
for path in ('/usr/x', '/proc/sys/net/ipv4/ip_forward', '/x'):
    try:
        open(path, 'w').write('1')
        print('wrote', path)
    except OSError as exc:
        print('denied', path)
"""
    try:
        done = run_rooted(["/usr/bin/env", "python3", "-c", probe], workspace=workspace, env={},
                          layout=RootLayout(tree=tree, hostname="rhel9-host"), timeout=60)
    finally:
        remove_tree(tree)
    if done.returncode == 127:  # no python3 in this machine's /usr: try this Python (mounted read-only)
        pytest.skip("this machine has no python3 in /usr for the probe (the sandbox mounts the host's /usr read-only)")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0] == "0 rhel9-host 0"
    assert {"etc", "boot", "var", "usr", "proc", "dev", "tmp"} <= set(json.loads(lines[1]))
    assert lines[2] == "False False False"
    assert lines[3].startswith("refused") and listener.accepted == 0
    assert lines[4:] == ["denied /usr/x", "denied /proc/sys/net/ipv4/ip_forward", "denied /x"]


# -- fetch scripts -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with served_twin(tmp_path_factory.mktemp("serve-sandbox"), "SRE-CacheFailure-v0") as line:
        yield line


@needs_sandbox
def test_a_fetch_script_reaches_the_api_through_the_relay_and_nothing_else(served: dict[str, Any], tmp_path: Path,
                                                                          listener: Listener) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    prometheus = urlsplit(served["prometheus"])
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "script.sh").write_text(f"""\
kubectl get pods -n otel-demo -o json > collected_data.json
echo "kubectl=$?"
echo pwned > {outside}/pwned.txt 2>/dev/null; echo "tmp-write=$([ -e {outside}/pwned.txt ] && echo inside-only)"
echo pwned > /usr/itbench-pwned 2>/dev/null; echo "usr-write=$?"
curl -sS -m 3 http://93.184.216.34/ >/dev/null 2>&1; echo "curl=$?"
curl -sS -m 3 {served['prometheus']}/api/v1/query?query=up >/dev/null 2>&1; echo "prometheus=$?"
(exec 3<>/dev/tcp/127.0.0.1/{listener.port}) 2>/dev/null; echo "loopback=$?"
(exec 3<>/dev/tcp/{prometheus.hostname}/{prometheus.port}) 2>/dev/null; echo "prometheus-tcp=$?"
""", encoding="utf-8")
    endpoints = Endpoints(kubeconfig=Path(served["kubeconfig"]), kube_cache_dir=tmp_path / "cache", prometheus=served["prometheus"])
    result = BashScriptTool().run({"text": "bash script.sh"}, _context(workspace, endpoints))
    assert result.exit_status == 0, result.text
    report = dict(line.split("=", 1) for line in result.text.splitlines() if "=" in line)
    assert report["kubectl"] == "0"
    pods = json.loads((workspace / "collected_data.json").read_text(encoding="utf-8"))
    assert pods["kind"] == "List" and any(p["metadata"]["name"].startswith("frontend") for p in pods["items"])
    assert report["usr-write"] != "0" and report["curl"] != "0" and report["prometheus"] != "0"
    assert report["loopback"] != "0" and report["prometheus-tcp"] != "0"
    assert not (outside / "pwned.txt").exists() and not Path("/usr/itbench-pwned").exists()
    assert listener.accepted == 0
    # The grader's path: the same script from a clean folder.
    grading = tmp_path / "grading"
    grading.mkdir()
    (grading / "script.sh").write_text("kubectl get deployments -n otel-demo -o json > collected_data.json\n", encoding="utf-8")
    done = run_script(grading, "script.sh", endpoints)
    assert done.returncode == 0, done.stderr
    assert json.loads((grading / "collected_data.json").read_text(encoding="utf-8"))["items"]
    # Each run's relay stops with it: a grader running hundreds of scripts keeps no thread per run.
    assert not [t for t in threading.enumerate() if t.name == "sandbox-relay"]


# -- no sandbox, no run --------------------------------------------------------------------------

def test_without_the_sandbox_playbooks_and_scripts_are_refused(monkeypatch: pytest.MonkeyPatch, model: HostModel,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv(SANDBOX_ENV, "none")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "playbook.yml").write_text("- hosts: localhost\n  tasks:\n    - copy: {content: x, dest: collected_data.json}\n",
                                            encoding="utf-8")
    (workspace / "script.sh").write_text("echo ran > collected_data.json\n", encoding="utf-8")
    refused = AnsiblePlaybookTool(model).run({"text": "ansible-playbook playbook.yml"}, _context(workspace))
    assert refused.exit_status == 126
    assert "ITBENCH_GYM_SANDBOX=none" in refused.text and "refused rather than run on this machine" in refused.text
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                          "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n", encoding="utf-8")
    endpoints = Endpoints(kubeconfig=kubeconfig, kube_cache_dir=tmp_path / "cache", prometheus=None)
    script = BashScriptTool().run({"text": "bash script.sh"}, _context(workspace, endpoints))
    assert script.exit_status == 126 and "refused" in script.text
    with pytest.raises(SandboxUnavailable, match="ITBENCH_GYM_SANDBOX=none"):
        run_playbook(model, workspace)
    assert not (workspace / "collected_data.json").exists()
