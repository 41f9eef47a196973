"""Action parsing and the kubectl tool's argument checks: bad input is an observation, never a crash."""

from __future__ import annotations

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
        ("", "subcommand"),
    ],
)
def test_kubectl_refusals(text: str, message: str) -> None:
    with pytest.raises(ToolInputError, match=message):
        KubectlTool().parse({"text": text})
