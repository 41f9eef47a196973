"""The agent's own files: write, read and list them in its episode workspace.

CISO agents produce artefacts (a Kyverno policy, ``policy.rego``, a fetch script, an Ansible playbook)
that the other tools read and the grader evaluates; they live in the workspace the env empties at
every reset. Paths are relative to it and never lead out of it (``cli_args.workspace_path``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text
from itbench_gym.tools.cli_args import read_text, workspace_path

#: Largest file the agent may write (a policy or playbook is a few kilobytes).
MAX_FILE_BYTES = 1024 * 1024
#: Files a workspace may hold.
MAX_FILES = 200


def _path_and_content(args: Mapping[str, Any]) -> tuple[str, str]:
    """``{"path", "content"}``, or the text form: the path on the first line, the content after it."""
    if "text" in args and "path" not in args:
        text = require_text(args["text"], "text", allow_nul=False)
        path, newline, content = text.partition("\n")
        if not newline:
            raise ToolInputError("write_file needs a path on the first line and the content on the lines after it, "
                                 "e.g. `write_file policy.rego\\npackage check\\n...`")
        return path.strip(), content
    return require_text(args.get("path", ""), "path", allow_nul=False).strip(), require_text(args.get("content", ""), "content", allow_nul=False)


class WriteFileTool:
    name = "write_file"
    description = ("Write a text file in your workspace (created or replaced): `write_file PATH` then the content on "
                   "the next lines, or args {path, content}. Paths are relative to the workspace; folders are created.")
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        shown, content = _path_and_content(args)
        if not shown:
            raise ToolInputError("write_file needs a path")
        data = content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ToolInputError(f"{shown}: {len(data):,} bytes; files are limited to {MAX_FILE_BYTES:,} bytes")
        target = workspace_path(ctx.workspace, shown)
        if target.is_dir():
            raise ToolInputError(f"{shown}: is a directory")
        if not target.exists() and sum(1 for p in ctx.workspace.rglob("*") if p.is_file()) >= MAX_FILES:
            raise ToolInputError(f"{shown}: the workspace already holds {MAX_FILES} files; overwrite or remove one")
        if target.parent.exists() and not target.parent.is_dir():
            raise ToolInputError(f"{shown}: {target.parent.relative_to(ctx.workspace.resolve())} is a file, not a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return ToolResult(text=f"wrote {shown} ({len(data):,} bytes)", data={"path": shown, "bytes": len(data)})


class ReadFileTool:
    name = "read_file"
    description = "Show a text file of your workspace: `read_file PATH` (e.g. the collected_data.json a script wrote)."
    parameters: Mapping[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        shown = require_text(args.get("path", args.get("text", "")), "path", allow_nul=False).strip()
        if not shown:
            raise ToolInputError("read_file needs a path")
        target = workspace_path(ctx.workspace, shown)
        if not target.exists():
            return ToolResult(text=f"{shown}: no such file in your workspace", exit_status=1)
        try:
            return ToolResult(text=bound_output(read_text(target, shown)), data={"path": shown})
        except OSError as exc:
            return ToolResult(text=str(exc), exit_status=1)


class ListFilesTool:
    name = "list_files"
    description = "List the files of your workspace with their sizes: `list_files` (or `list_files FOLDER`)."
    parameters: Mapping[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        shown = require_text(args.get("path", args.get("text", "")) or ".", "path", allow_nul=False).strip() or "."
        folder = workspace_path(ctx.workspace, shown)
        if not folder.is_dir():
            return ToolResult(text=f"{shown}: no such folder in your workspace", exit_status=1)
        root = ctx.workspace.resolve()
        rows = [f"{p.stat().st_size:>10,}  {p.relative_to(root).as_posix()}" for p in sorted(folder.rglob("*")) if p.is_file()]
        return ToolResult(text=bound_output("\n".join(rows) if rows else "(no files)"), data={"files": len(rows)})
