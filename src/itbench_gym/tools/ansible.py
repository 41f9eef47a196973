"""``ansible-playbook`` — the real one from ansible-core — against a modelled RHEL host, in the rooted sandbox.

The rhel9-opa scenarios give the agent an inventory whose group ``rhel9_servers`` holds one RHEL 9
server. Here that server is a host model (``itbench_gym.hosts``): each run materialises a throwaway copy
of it as the sandbox's /etc, /var, /boot..., installs its own ``systemctl``, ``rpm``, ``sysctl``,
``sudo`` and Python ``rpm`` module, and runs ansible-playbook with a local connection inside, so facts,
``shell``/``command`` (grep, cat, stat, awk... from the real read-only /usr), ``stat``, ``slurp``,
``service_facts``, ``package_facts`` and ``become`` see that host, and ``delegate_to: localhost``
writes land in the workspace. There is no network, and nothing but the workspace outlives the run.
Without bubblewrap the tool refuses (``sandbox.require_isolation``): an agent's playbook never runs on
this machine.
"""

from __future__ import annotations

import importlib.util
import os
import site
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from itbench_gym.hosts import commands
from itbench_gym.hosts.model import HostModel
from itbench_gym.hosts.root import materialise, remove_tree
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output
from itbench_gym.tools.cli_args import CommandLineError, command_argv, command_parameters, parse_flags, workspace_path
from itbench_gym.tools.sandbox import MAX_CAPTURE_BYTES, Completed, RootLayout, SandboxUnavailable, run_rooted
from itbench_gym.workdirs import WorkDir

INVENTORY_FILE = "inventory.ansible.ini"
HOST_GROUP = "rhel9_servers"
#: Wall-clock bound of one run (fact gathering on two busy cores takes a few seconds).
TIMEOUT_SECONDS = 300.0
#: Where the run's ansible configuration sits inside the sandbox (ansible-core's system-wide place).
CONFIG_INSIDE = "/etc/ansible/ansible.cfg"
#: Ansible's own scratch space: the sandbox's private /tmp, gone with the run.
_ANSIBLE_TMP = "/tmp/.ansible"

_FLAGS = {
    "inventory": "value", "check": "bool", "diff": "bool", "verbose": "bool", "tags": "value", "skip-tags": "value",
    "limit": "value", "extra-vars": "value", "list-tasks": "bool", "list-hosts": "bool", "list-tags": "bool",
    "syntax-check": "bool", "start-at-task": "value", "become": "bool", "forks": "value", "flush-cache": "bool",
    "force-handlers": "bool", "help": "bool", "version": "bool",
}
_SHORT = {"i": "inventory", "C": "check", "D": "diff", "v": "verbose", "t": "tags", "l": "limit", "e": "extra-vars",
          "b": "become", "f": "forks", "h": "help"}
_REFUSED = {
    "vault-password-file": "there are no vault secrets on this host",
    "ask-vault-pass": "there is no terminal to type a password into",
    "ask-pass": "the host is reached without a password", "k": "the host is reached without a password",
    "ask-become-pass": "become needs no password on this host", "K": "become needs no password on this host",
    "module-path": "only ansible-core's own modules are installed", "M": "only ansible-core's own modules are installed",
    "connection": "the inventory's connection is the only way to the host", "c": "the inventory's connection is the only way to the host",
    "private-key": "the host is reached without SSH keys", "user": "the host is reached as root", "u": "the host is reached as root",
    "step": "there is no terminal to answer its prompts",
}

USAGE = """Usage: ansible-playbook [options] PLAYBOOK [PLAYBOOK ...]

Runs Ansible playbooks (ansible-core) against the hosts of the inventory. Paths are relative to your
workspace; the RHEL server is group `rhel9_servers` in `inventory.ansible.ini` (the default inventory).

Options:
  -i, --inventory FILE      inventory file (default: inventory.ansible.ini)
  -C, --check               don't make any changes; predict some of the changes that may occur
  -D, --diff                show the differences in files and templates that change
  -v, --verbose             more output (-vvv for connection details)
  -t, --tags TAGS           only run plays and tasks tagged with these values
      --skip-tags TAGS      only run plays and tasks whose tags do not match these values
  -l, --limit SUBSET        further limit selected hosts to an additional pattern
  -e, --extra-vars VARS     set additional variables as key=value, YAML/JSON, or @file
  -b, --become              run operations with become
      --list-tasks, --list-hosts, --list-tags, --syntax-check
      --start-at-task NAME  start the playbook at the task matching this name
  -f, --forks N             number of parallel processes
  -h, --help                show this help"""


def inventory_text(model: HostModel) -> str:
    """The agent's inventory: group ``rhel9_servers`` with the modelled server, reached locally in the sandbox."""
    return (f"# The RHEL 9 server to assess ({model.hostname}). Inside the sandbox the server's filesystem is the\n"
            "# machine ansible runs on, so its connection is local.\n"
            f"[{HOST_GROUP}]\n{model.hostname} ansible_connection=local\n")


def write_inventory(workspace: Path, model: HostModel) -> Path:
    """Put ``inventory.ansible.ini`` in ``workspace`` unless one is there; its path."""
    path = workspace / INVENTORY_FILE
    if not path.exists():
        path.write_text(inventory_text(model), encoding="utf-8")
    return path


def ansible_config(workspace: Path) -> str:
    """The whole ansible configuration of a run: no host key checking, no retry files, scratch in /tmp."""
    return "\n".join([
        "# ansible-core configuration for assessing the modelled host (itbench_gym.tools.ansible)",
        "[defaults]",
        f"inventory = {workspace / INVENTORY_FILE}",
        "host_key_checking = False",
        "retry_files_enabled = False",
        f"interpreter_python = {sys.executable}",
        f"local_tmp = {_ANSIBLE_TMP}/tmp",
        f"remote_tmp = {_ANSIBLE_TMP}/tmp",
        "forks = 5",
        "timeout = 10",
        "nocolor = True",
        "gathering = implicit",
        "deprecation_warnings = False",
        "",
        "[privilege_escalation]",
        "become_method = sudo",
        "",
        "[ssh_connection]",
        "pipelining = True",
        "",
    ])


def _ansible_playbook() -> list[str]:
    """How to start ansible-playbook with this Python (its console script, else the module)."""
    script = Path(sys.executable).parent / "ansible-playbook"
    if script.is_file():
        return [sys.executable, str(script)]
    if importlib.util.find_spec("ansible") is None:
        raise SandboxUnavailable("ansible-core is not installed in this Python environment (pip install ansible-core)")
    return [sys.executable, "-m", "ansible.cli.playbook"]


def _site_dirs_under_local() -> list[str]:
    """Package folders of this Python that live under /usr/local, which the sandbox covers with the host's own."""
    found = {p for p in site.getsitepackages() if p.startswith("/usr/local/")}
    spec = importlib.util.find_spec("ansible")
    if spec is not None and spec.origin is not None:
        found.add(str(Path(spec.origin).resolve().parent.parent))
    return sorted(p for p in found if p.startswith("/usr/local/") and os.path.isdir(p))


def run_ansible(model: HostModel, workspace: Path, args: Sequence[str], *, timeout: float = TIMEOUT_SECONDS) -> Completed:
    """``ansible-playbook ARGS`` in ``workspace`` against ``model``, in the rooted sandbox.

    Raises SandboxUnavailable where the sandbox cannot run (it never runs the playbook without it).
    """
    write_inventory(workspace, model)
    work = WorkDir("host")  # 0700, swept if this process dies mid-run
    scratch = work.path
    try:
        tree = materialise(model, scratch / "root")
        config = tree / CONFIG_INSIDE.lstrip("/")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(ansible_config(workspace), encoding="utf-8")
        installed = commands.install(model, scratch / "local")
        read_only: list[Path] = []
        for folder in _site_dirs_under_local():
            (installed.local / os.path.relpath(folder, "/usr/local")).mkdir(parents=True, exist_ok=True)
            read_only.append(Path(folder))
        layout = RootLayout(tree=tree, hostname=model.hostname, local=installed.local, overlays=installed.overlays,
                            read_only=read_only)
        env = {
            "ANSIBLE_CONFIG": CONFIG_INSIDE, "ANSIBLE_HOME": _ANSIBLE_TMP, "ANSIBLE_LOCAL_TEMP": f"{_ANSIBLE_TMP}/tmp",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PYTHONPATH": installed.python_path,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return run_rooted([*_ansible_playbook(), *args], workspace=workspace, layout=layout, env=env, timeout=timeout)
    finally:
        remove_tree(scratch)  # folder modes like 0500 (/root, /boot) need more than WorkDir's rmtree
        work.close()


def run_playbook(model: HostModel, workspace: Path, playbook: str = "playbook.yml", *, inventory: str = INVENTORY_FILE,
                 extra_args: Sequence[str] = (), timeout: float = TIMEOUT_SECONDS) -> Completed:
    """What ITBench's grader runs: ``ansible-playbook PLAYBOOK -i INVENTORY`` in ``workspace`` (the inventory is
    written there first when missing). Raises SandboxUnavailable where the sandbox cannot run."""
    return run_ansible(model, workspace, [playbook, "-i", inventory, *extra_args], timeout=timeout)


def run_playbook_text(model: HostModel, playbook: str, workspace: Path, *, timeout: float = TIMEOUT_SECONDS) -> tuple[int, str, str]:
    """Write ``playbook`` (YAML text) as ``playbook.yml`` in ``workspace``, run it on ``model``: (exit code, stdout, stderr)."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "playbook.yml").write_text(playbook, encoding="utf-8")
    done = run_playbook(model, workspace, "playbook.yml", timeout=timeout)
    return done.returncode, done.stdout, done.stderr


class AnsiblePlaybookTool:
    """``ansible-playbook PLAYBOOK [-i INVENTORY] [--check] [-v...] [--tags ...]`` on the scenario's host."""

    name = "ansible-playbook"
    description = (
        "Run the real ansible-playbook (ansible-core) on a playbook in your workspace against the RHEL 9 server of "
        "`inventory.ansible.ini` (group `rhel9_servers`), e.g. `ansible-playbook playbook.yml -i inventory.ansible.ini`. "
        "Options: -i, --check, --diff, -v..., --tags, --skip-tags, --limit, -e, --syntax-check, --list-tasks. Tasks run "
        "without network; files written with `delegate_to: localhost` to a relative path land in your workspace."
    )
    parameters: Mapping[str, Any] = command_parameters("ansible-playbook", "ansible-playbook playbook.yml -i inventory.ansible.ini")
    cost_seconds = 15.0

    def __init__(self, host: HostModel | Callable[[], HostModel | None]) -> None:
        self._host = host

    def model(self) -> HostModel:
        host = self._host() if callable(self._host) else self._host
        if host is None:
            raise ToolInputError("there is no host to run playbooks against yet (the scenario has not been set up)")
        return host

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        argv = command_argv(args, "ansible-playbook")
        model = self.model()
        write_inventory(ctx.workspace, model)  # the scenario's inventory is in the workspace from the first call
        try:
            forwarded = self.parse(argv, ctx.workspace)
        except CommandLineError as exc:
            return ToolResult(text=f"ERROR! {exc}\n\n{USAGE}", exit_status=2, data={"argv": ["ansible-playbook", *argv]})
        if forwarded is None:
            return ToolResult(text=USAGE, data={"argv": ["ansible-playbook", *argv]})
        timeout = max(1.0, min(TIMEOUT_SECONDS, ctx.time_left()))
        started = time.monotonic()
        try:
            done = run_ansible(model, ctx.workspace, forwarded, timeout=timeout)
        except SandboxUnavailable as exc:
            return ToolResult(text=f"ansible-playbook refused: {exc}", exit_status=126, data={"argv": ["ansible-playbook", *argv]})
        return program_result("ansible-playbook", argv, done, timeout, time.monotonic() - started)

    @staticmethod
    def parse(argv: list[str], workspace: Path) -> list[str] | None:
        """The arguments to hand to ansible-playbook (paths checked against the workspace); None for --help."""
        for token in argv:
            name = token.lstrip("-").split("=", 1)[0]
            if token.startswith("-") and name in _REFUSED and (token.startswith("--") or len(name) == 1):
                raise ToolInputError(f"option {token} is not available: {_REFUSED[name]}")
        flags = parse_flags(argv, _FLAGS, _SHORT)
        if flags.enabled("help"):
            return None
        if flags.enabled("version"):
            return ["--version"]
        if not flags.args and not flags.enabled("version"):
            raise CommandLineError("the following arguments are required: playbook")
        out: list[str] = []
        for value in flags.every("inventory"):
            if "," in value:
                raise ToolInputError(f"-i {value}: give the inventory file (inventory.ansible.ini), not a host list")
            require_workspace_file(workspace, value)
            out += ["-i", value]
        for value in flags.every("extra-vars"):
            if value.startswith("@"):
                require_workspace_file(workspace, value[1:])
            out += ["-e", value]
        for name in ("tags", "skip-tags", "limit", "start-at-task", "forks"):
            for value in flags.every(name):
                out += [f"--{name}", value]
        for name in ("check", "diff", "list-tasks", "list-hosts", "list-tags", "syntax-check", "become", "flush-cache", "force-handlers"):
            if flags.enabled(name):
                out.append(f"--{name}")
        verbosity = sum(1 for v in flags.values.get("verbose", []) if v == "true")
        if verbosity:
            out.append("-" + "v" * min(verbosity, 4))
        for playbook in flags.args:
            require_workspace_file(workspace, playbook)
        return [*out, *flags.args]


def require_workspace_file(workspace: Path, value: str) -> None:
    """A workspace file the run reads: inside the workspace (symlinks followed) and present."""
    if not workspace_path(workspace, value).is_file():
        raise ToolInputError(f"{value}: no such file in your workspace")


def program_result(program: str, argv: Sequence[str], done: Completed, timeout: float, seconds: float) -> ToolResult:
    """A run as the agent's observation: stdout then stderr, bounded, with the exit code."""
    data = {"argv": [program, *argv], "exit_code": done.returncode, "stdout": bound_output(done.stdout),
            "stderr": bound_output(done.stderr), "wall_seconds": round(seconds, 3)}
    text = done.stdout
    if done.stderr:
        text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{done.stderr}"
    if done.timed_out:
        text += f"\n{program} did not finish within {timeout:.0f} s and was stopped"
    if done.overflowed:
        text += f"\n{program} wrote more than {MAX_CAPTURE_BYTES // 2**20} MiB and was stopped"
    if done.out_of_time:
        text += f"\n{program} was stopped: the episode's time ran out while it waited"
    return ToolResult(text=bound_output(text.rstrip("\n")), exit_status=done.returncode, data=data)
