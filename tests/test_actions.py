"""Action parsing and the kubectl tool's argument checks: bad input is an observation, never a crash."""

from __future__ import annotations

import re

import pytest

from itbench_gym.actions import MAX_ACTION_CHARS, ActionError, parse_action
from itbench_gym.tools import ToolInputError
from itbench_gym.tools.kubectl import KubectlTool

TOOLS = ("kubectl", "promql", "alerts", "wait", "submit")


def test_text_action() -> None:
    call = parse_action("kubectl get pods -n otel-demo", TOOLS)
    assert call.tool == "kubectl" and call.args == {"text": "get pods -n otel-demo"}


def test_tool_call_action() -> None:
    call = parse_action({"tool": "wait", "args": {"seconds": 30}}, TOOLS)
    assert call.tool == "wait" and call.args == {"seconds": 30}


def test_unknown_tool_suggests() -> None:
    with pytest.raises(ActionError, match="did you mean 'kubectl'|Did you mean 'kubectl'"):
        parse_action("kubctl get pods", TOOLS)


@pytest.mark.parametrize("bad", [None, 42, ["kubectl"], {"args": {}}, {"tool": 3}, {"tool": "wait", "extra": 1}, "", "   "])
def test_malformed_actions(bad: object) -> None:
    with pytest.raises(ActionError):
        parse_action(bad, TOOLS)


def test_huge_action_is_refused_with_its_size() -> None:
    with pytest.raises(ActionError, match="1,000,000 characters"):
        parse_action("kubectl " + "x" * (1_000_000 - 8), TOOLS)
    assert MAX_ACTION_CHARS < 1_000_000


def test_kubectl_parse_plain_and_quoted() -> None:
    tool = KubectlTool()
    argv, stdin = tool.parse({"text": "get pods -n otel-demo -o jsonpath='{.items[*].metadata.name}'"})
    assert argv == ["get", "pods", "-n", "otel-demo", "-o", "jsonpath={.items[*].metadata.name}"] and stdin is None


def test_kubectl_heredoc_becomes_stdin() -> None:
    argv, stdin = KubectlTool().parse({"text": "apply -f - <<EOF\napiVersion: v1\nkind: ConfigMap\nEOF"})
    assert argv == ["apply", "-f", "-"]
    assert stdin == "apiVersion: v1\nkind: ConfigMap\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("get pods | grep frontend", "without a shell"),
        ("get pods --kubeconfig=/tmp/admin", "not allowed"),
        ("--token abc get pods", "not allowed"),
        ("edit configmap flagd-config", "kubectl patch"),
        ("get pods -o 'unterminated", "quotes"),
        ("", "needs a command"),
        ("rollout deploy/frontend", "needs a subcommand: history, pause, restart"),
        ("-n otel-demo config set-credentials x --token=y", "credentials and context are fixed"),
        ("get pods -o jsonpath-file=/etc/shadow", "reads a local file"),
        ("get pods --no-such-flag", "unknown or unavailable flag --no-such-flag for `kubectl get`"),
        ("gett pods", "Did you mean 'get'"),
    ],
)
def test_kubectl_refusals(text: str, message: str) -> None:
    with pytest.raises(ToolInputError, match=re.escape(message)):
        KubectlTool().parse({"text": text})


@pytest.mark.parametrize(
    "text, command, args",
    [
        ("-n otel-demo get pods -owide", "get", ["pods"]),
        ("get -n=otel-demo pods -A --show-labels=false", "get", ["pods"]),
        ("--request-timeout 5s -v=6 describe deploy frontend", "describe", ["deploy", "frontend"]),
        ("top pods -n otel-demo", "top pod", []),
        ("create cm c --from-literal=a=b", "create configmap", ["c"]),
        ("create rolebinding r --user=bob --clusterrole=view", "create rolebinding", ["r"]),
        ("exec -it frontend-x -- sh -c 'echo -n hi'", "exec", ["frontend-x", "sh", "-c", "echo -n hi"]),
        ("rollout restart deployment/flagd", "rollout restart", ["deployment/flagd"]),
    ],
)
def test_kubectl_grammar_reads_commands_as_kubectl_does(text: str, command: str, args: list[str]) -> None:
    argv, _ = KubectlTool().parse({"text": text})
    invocation = KubectlTool.check(argv)
    assert (invocation.command, invocation.args) == (command, args)
