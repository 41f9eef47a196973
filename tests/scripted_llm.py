"""A local OpenAI-compatible Chat Completions server that plays a script: the test double of a model endpoint.

Each request to ``POST /v1/chat/completions`` takes the next step of the script: a tool call, a text
reply, an HTTP error status, a reply with no choices, or a delay longer than the client's timeout.
The server records every request body, so tests can check what the agent sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    """A step replying with one tool call; ``arguments`` is sent as JSON, or verbatim when a string."""
    return {"tool": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}


def text(content: str) -> dict[str, Any]:
    return {"text": content}


def status(code: int) -> dict[str, Any]:
    return {"status": code}


def delay(seconds: float) -> dict[str, Any]:
    return {"sleep": seconds}


NO_CHOICES: dict[str, Any] = {"no_choices": True}


@dataclass
class ScriptedModel:
    script: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        if request.path != "/v1/chat/completions" or request.method != "POST":
            return Response("not found", status=404)(environ, start_response)
        body = json.loads(request.get_data(as_text=True))
        self.requests.append(body)
        step = self.script.pop(0) if self.script else text("(the script has ended)")
        if "sleep" in step:
            time.sleep(step["sleep"])
            step = text("too late")
        if "status" in step:
            error = {"error": {"message": f"scripted {step['status']}", "type": "server_error"}}
            return Response(json.dumps(error), status=step["status"], content_type="application/json")(environ, start_response)
        message: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
        if "tool" in step:
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}", "type": "function",
                                      "function": {"name": step["tool"], "arguments": step["arguments"]}}]
        choices = [] if step.get("no_choices") else [{"index": 0, "message": message, "finish_reason": "stop"}]
        prompt = sum(len(str(m.get("content") or "")) for m in body["messages"]) // 4
        reply = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": choices, "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}}
        return Response(json.dumps(reply), content_type="application/json")(environ, start_response)


@contextmanager
def scripted_model(script: Sequence[dict[str, Any]]) -> Iterator[ScriptedModel]:
    model = ScriptedModel(list(script))
    server = make_server("127.0.0.1", 0, model, threaded=True)
    model.base_url = f"http://127.0.0.1:{server.server_port}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        thread.join(timeout=10)
