"""What a user sees running programs and shell scripts in a container of the twin (``kubectl exec``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from itbench_gym.backends.sim.containers import programs
from itbench_gym.backends.sim.containers.context import EXEC_DATA_CEILING, EXEC_WORK_CEILING, Container, ExecResult, FileTree, WritableMount
from itbench_gym.backends.sim.containers.runner import DEFAULT_PATH
from itbench_gym.backends.sim.kube.registry import shared

STAMP = "..2026_12_06_07_37_00.123456789"
CONFIG = b"receivers:\n  otlp:\n    protocols:\n      grpc:\n"
HOSTS = b"127.0.0.1\tlocalhost\n10.244.0.7\tcollector-0\n"
UNMODELLED = "the itbench_gym twin does not model what is here"
#: A container's env as containerd and the kubelet build it: the runtime's default PATH and the image catalogue's
#: HOME for root (paths inside the modelled container, not on any host).
HOME = shared().default_home
ENV = {"PATH": DEFAULT_PATH, "HOSTNAME": "collector-0", "HOME": HOME,
       "OTEL_SERVICE_NAME": "otelcol", "SERVICE_PORT": "4317", "SERVICE_HOST": "10.96.0.12"}


def _tree() -> FileTree:
    return FileTree(
        files={f"/etc/otelcol/{STAMP}/config.yaml": CONFIG, f"/etc/otelcol/{STAMP}/relay.yaml": b"relay: true\n",
               "/etc/hosts": HOSTS, "/etc/hostname": b"collector-0\n", "/etc/resolv.conf": b"nameserver 10.96.0.10\n",
               "/dev/termination-log": b""},
        directories=frozenset({"/", "/etc", "/dev", "/etc/otelcol", f"/etc/otelcol/{STAMP}"}),
        modelled=frozenset({"/etc/otelcol", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log"}),
        links={"/etc/otelcol/..data": STAMP, "/etc/otelcol/config.yaml": "..data/config.yaml",
               "/etc/otelcol/relay.yaml": "..data/relay.yaml"},
    )


def _container(executables: tuple[str, ...]) -> Container:
    return Container("collector-0", "otel", "otelcol", "example/otelcol:1", "collector-0", ENV, _tree(), executables,
                     now=1796542620.0)


ALPINE = _container(("sh", "ash", "cat", "env", "printenv", "ls", "grep", "sort", "head", "tail", "wc", "uniq", "echo",
                     "date", "hostname", "sleep", "wget", "nc", "vi"))
DEBIAN = _container(("sh", "bash", "dash", "cat", "env", "printenv", "ls", "grep", "sort", "head", "wc", "date", "sleep"))
DISTROLESS = _container(("/otelcol",))


def run(container: Container, *argv: str, stdin: bytes = b"") -> ExecResult:
    return programs.run(list(argv), container, stdin)


def sh(container: Container, script: str, shell: str = "sh") -> ExecResult:
    return run(container, shell, "-c", script)


def test_env_prints_the_container_env_in_order() -> None:
    result = run(ALPINE, "env")
    assert result.code == 0
    assert result.stdout.decode().splitlines() == [f"{k}={v}" for k, v in ENV.items()]


def test_env_runs_a_command_with_an_extra_variable() -> None:
    result = run(DEBIAN, "env", "EXTRA=1", "printenv", "EXTRA", "HOME")
    assert (result.stdout, result.code) == (b"1\n" + HOME.encode() + b"\n", 0)
    missing = run(DEBIAN, "env", "nosuch")
    assert (missing.stderr, missing.code) == (b"env: 'nosuch': No such file or directory\n", 127)


def test_printenv_exit_status_says_whether_every_name_is_set() -> None:
    assert run(ALPINE, "printenv", "HOME") == ExecResult(HOME.encode() + b"\n", b"", 0)
    assert run(ALPINE, "printenv", "HOME", "NOPE") == ExecResult(HOME.encode() + b"\n", b"", 1)


def test_cat_reads_a_configmap_key_through_its_links() -> None:
    assert run(ALPINE, "cat", "/etc/otelcol/config.yaml") == ExecResult(CONFIG, b"", 0)
    assert run(DEBIAN, "cat", "/etc/otelcol/..data/relay.yaml").stdout == b"relay: true\n"


def test_cat_of_a_missing_file_under_a_mount_is_the_real_error() -> None:
    assert run(ALPINE, "cat", "/etc/otelcol/nope.yaml") == ExecResult(
        b"", b"cat: can't open '/etc/otelcol/nope.yaml': No such file or directory\n", 1)
    assert run(DEBIAN, "cat", "/etc/otelcol/nope.yaml") == ExecResult(b"", b"cat: /etc/otelcol/nope.yaml: No such file or directory\n", 1)
    assert run(DEBIAN, "cat", "/etc").stderr == b"cat: /etc: Is a directory\n"


def test_cat_of_the_images_own_file_says_the_twin_does_not_model_it() -> None:
    result = run(DEBIAN, "cat", "/app/server.js", "/etc/hosts")
    assert result.code == 1
    assert result.stdout == HOSTS
    assert result.stderr.decode().startswith(f"cat: /app/server.js: {UNMODELLED} (it knows")
    assert "No such file" not in result.stderr.decode()


def test_ls_of_a_configmap_mount_hides_the_atomic_writer_entries() -> None:
    assert run(ALPINE, "ls", "/etc/otelcol") == ExecResult(b"config.yaml\nrelay.yaml\n", b"", 0)


def test_ls_la_of_a_configmap_mount_shows_the_links() -> None:
    gnu = run(DEBIAN, "ls", "-la", "/etc/otelcol").stdout.decode().splitlines()
    assert gnu[0] == "total 12"
    assert [line.split(" 07:37 ", 1)[1] for line in gnu[1:]] == [
        ".", "..", STAMP, f"..data -> {STAMP}", "config.yaml -> ..data/config.yaml", "relay.yaml -> ..data/relay.yaml"]
    assert gnu[4] == f"lrwxrwxrwx 1 root root   31 Dec  6 07:37 ..data -> {STAMP}"
    busybox = run(ALPINE, "ls", "-l", "/etc/otelcol/config.yaml").stdout.decode()
    assert busybox == "lrwxrwxrwx    1 root     root            18 Dec  6 07:37 /etc/otelcol/config.yaml -> ..data/config.yaml\n"


def test_ls_of_a_directory_above_the_mounts_lists_what_is_known_and_says_so() -> None:
    result = run(DEBIAN, "ls", "/etc")
    assert result.stdout == b"hostname\nhosts\notelcol\nresolv.conf\n"
    assert result.stderr.decode().startswith(f"ls: /etc: {UNMODELLED}")
    assert result.code == 1


def test_ls_of_a_missing_path_under_a_mount() -> None:
    assert run(DEBIAN, "ls", "/etc/otelcol/x") == ExecResult(b"", b"ls: cannot access '/etc/otelcol/x': No such file or directory\n", 2)
    assert run(ALPINE, "ls", "/etc/otelcol/x") == ExecResult(b"", b"ls: /etc/otelcol/x: No such file or directory\n", 1)


def test_a_pipeline_feeds_each_stage_the_previous_output() -> None:
    result = sh(ALPINE, "env | grep -i service | sort")
    assert result == ExecResult(b"OTEL_SERVICE_NAME=otelcol\nSERVICE_HOST=10.96.0.12\nSERVICE_PORT=4317\n", b"", 0)
    assert sh(DEBIAN, "cat /etc/hosts | head -n 1 | wc -l").stdout == b"1\n"


def test_lists_run_by_the_previous_status() -> None:
    assert sh(ALPINE, "false && echo no || echo yes; echo $?").stdout == b"yes\n0\n"
    assert sh(ALPINE, "grep -q zzz /etc/hosts; echo $?; true && echo ran").stdout == b"1\nran\n"


def test_quoting_and_parameter_expansion() -> None:
    result = sh(DEBIAN, "X=; echo \"$HOME\" '$HOME' ${X:-d} ${UNSET-u} ${HOME:+set} \"${SERVICE_PORT}\"x \\$HOME")
    assert result == ExecResult(HOME.encode() + b" $HOME d u set 4317x $HOME\n", b"", 0)
    assert sh(DEBIAN, 'A="a   b"; for w in $A "$A"; do echo "[$w]"; done').stdout == b"[a]\n[b]\n[a   b]\n"
    assert sh(DEBIAN, "echo ~ ~/.kube").stdout == f"{HOME} {HOME}/.kube\n".encode()


def test_positional_parameters_of_sh_c() -> None:
    result = run(DEBIAN, "sh", "-c", 'echo "$0" $# "$@"; for a in "$@"; do echo "<$a>"; done', "name", "a b", "c")
    assert result.stdout == b"name 2 a b c\n<a b>\n<c>\n"


def test_assignment_before_a_command_is_in_its_env_only() -> None:
    result = sh(ALPINE, "LEVEL=debug env | grep LEVEL; echo \"${LEVEL-unset}\"; LEVEL=x; printenv LEVEL; echo $?")
    assert result.stdout == b"LEVEL=debug\nunset\n1\n"
    assert sh(ALPINE, "export LEVEL=x; printenv LEVEL").stdout == b"x\n"


def test_redirects_to_dev_null_and_between_streams() -> None:
    result = sh(DEBIAN, "cat /etc/otelcol/nope 2>/dev/null; echo quiet > /dev/null; cat /etc/otelcol/nope 2>&1")
    assert result == ExecResult(b"cat: /etc/otelcol/nope: No such file or directory\n", b"", 1)
    assert sh(DEBIAN, "echo to-err >&2") == ExecResult(b"", b"to-err\n", 0)
    assert sh(DEBIAN, "grep otel < /etc/hosts; wc -l < /etc/hosts").stdout == b"2\n"


def test_exit_sets_the_status() -> None:
    assert sh(ALPINE, "echo before; exit 3; echo after") == ExecResult(b"before\n", b"", 3)


@pytest.mark.parametrize(("container", "shell", "message"), [
    (ALPINE, "sh", b"sh: foo: not found\n"),
    (DEBIAN, "sh", b"sh: 1: foo: not found\n"),
    (DEBIAN, "/bin/sh", b"/bin/sh: 1: foo: not found\n"),
    (DEBIAN, "bash", b"bash: line 1: foo: command not found\n"),
])
def test_command_not_found_per_shell(container: Container, shell: str, message: bytes) -> None:
    assert sh(container, "foo", shell) == ExecResult(b"", message, 127)


def test_an_image_program_the_twin_does_not_emulate() -> None:
    result = run(ALPINE, "vi", "/etc/hosts")
    assert result.code == 126
    assert result.stderr == (b"itbench_gym: vi is in this container's image, but the twin does not emulate it (emulated: ash, cat, date, "
                             b"echo, env, grep, head, hostname, ls, nc, printenv, sh, sleep, sort, tail, uniq, wc, wget)\n")
    assert run(DISTROLESS, "/otelcol", "--version").code == 126


def test_network_clients_without_a_modelled_network_say_so() -> None:
    result = sh(ALPINE, "nc -z localhost 4317")
    assert (result.code, result.stderr) == (1, b"nc: the itbench_gym twin does not model this pod's network\n")


def test_builtins_work_without_the_external_program() -> None:
    assert "echo" not in DEBIAN.executables
    assert sh(DEBIAN, "echo hi; printf '%s=%d\\n' a 1 b 2; [ -f /etc/hosts ] && pwd").stdout == b"hi\na=1\nb=2\n/\n"


def test_writes_are_refused() -> None:
    assert sh(ALPINE, "echo x > /etc/otelcol/config.yaml") == ExecResult(
        b"", b"sh: /etc/otelcol/config.yaml: the itbench_gym twin does not keep files written in containers\n", 1)
    assert sh(ALPINE, "echo x >> /tmp/log && echo no").code == 1


@pytest.mark.parametrize(("container", "shell", "message"), [
    (ALPINE, "sh", b"sh: syntax error: unexpected end of file\n"),
    (DEBIAN, "sh", b"sh: 1: Syntax error: end of file unexpected\n"),
    (DEBIAN, "bash", b"bash: -c: line 1: syntax error: unexpected end of file\n"),
])
def test_a_syntax_error(container: Container, shell: str, message: bytes) -> None:
    assert sh(container, "if true; then echo x", shell) == ExecResult(b"", message, 2)


def test_unsupported_constructs_are_refused_by_name() -> None:
    result = sh(DEBIAN, "echo $((1 + 2))")
    assert result.code == 2
    assert result.stderr.startswith(b"sh: the itbench_gym twin's shell does not support arithmetic expansion $((...)) (supported: ")
    assert result.stdout == b""
    for script, what in [("cat <<EOF\nx\nEOF", b"here-documents"), ("sleep 1 &", b"background"), ("f() { :; }", b"functions")]:
        refused = sh(ALPINE, script)
        assert refused.code == 2 and what in refused.stderr


def test_command_substitution_runs_in_a_subshell() -> None:
    assert sh(ALPINE, 'echo "host: $(hostname)"; echo `echo back`; echo $(echo a $(echo b))').stdout == \
        f"host: {ALPINE.hostname}\nback\na b\n".encode()
    assert sh(ALPINE, 'n=$(wc -l < /etc/hosts); echo "$n lines"').stdout == b"2 lines\n"
    assert sh(ALPINE, 'echo "$(printf "a\\nb\\n\\n")|"').stdout == b"a\nb|\n"  # trailing newlines dropped
    assert sh(ALPINE, "x=$(false); echo $?; x=$(true); echo $?").stdout == b"1\n0\n"
    missing = sh(ALPINE, "echo [$(nosuch)]")
    assert (missing.stdout, missing.stderr) == (b"[]\n", b"sh: nosuch: not found\n")
    assert sh(ALPINE, "X=1; echo $(X=2; echo $X) $X").stdout == b"2 1\n"


def test_a_subshell_keeps_its_changes_and_its_exit_to_itself() -> None:
    assert sh(ALPINE, "X=1; (X=2; cd /etc; echo $X $PWD); echo $X $PWD").stdout == b"2 /etc\n1 /\n"
    assert sh(DEBIAN, "(exit 3); echo $?; (echo in; exit 4) || echo failed").stdout == b"3\nin\nfailed\n"
    assert sh(ALPINE, "(echo a; echo b) | wc -l").stdout == b"2\n"
    assert sh(ALPINE, "(cat /etc/hosts) > /dev/null; echo done").stdout == b"done\n"
    ended = sh(DEBIAN, "set -e; (false); echo not reached")
    assert (ended.stdout, ended.code) == (b"", 1)


def test_compound_commands() -> None:
    script = "for f in /etc/otelcol/*.yaml; do if grep -q otlp \"$f\"; then echo \"$f\"; fi; done"
    assert sh(DEBIAN, script).stdout == b"/etc/otelcol/config.yaml\n"
    assert sh(ALPINE, "cat /etc/hosts | while read ip name; do echo \"$name\"; done").stdout == b"localhost\ncollector-0\n"
    assert sh(ALPINE, "cd /etc/otelcol && ls && cd /etc/otelcol/nope").code == 2


def test_programs_follow_gnu_or_busybox() -> None:
    assert run(ALPINE, "date") == ExecResult(b"Sun Dec  6 07:37:00 UTC 2026\n", b"", 0)
    assert run(DEBIAN, "date", "+%Y-%m-%dT%H:%M:%S%z").stdout == b"2026-12-06T07:37:00+0000\n"
    assert run(DEBIAN, "wc", "-l", "/etc/hosts").stdout == b"2 /etc/hosts\n"
    assert run(DEBIAN, "wc", stdin=b"a b\n").stdout == b"      1       2       4\n"
    assert run(ALPINE, "wc", stdin=b"a b\n").stdout == b"        1         2         4\n"
    assert run(ALPINE, "hostname").stdout == b"collector-0\n"
    assert run(DEBIAN, "sleep", "x").code == 1
    assert run(DEBIAN, "grep", "-c", r"^\(127\|10\)\.", "/etc/hosts").stdout == b"2\n"
    assert run(DEBIAN, "grep", "(", stdin=b"a(b\n").stdout == b"a(b\n"
    assert run(DEBIAN, "sort", "-n", "-r", stdin=b"9\n10\n2\n").stdout == b"10\n9\n2\n"
    assert run(ALPINE, "uniq", "-c", stdin=b"a\na\nb\n").stdout == b"      2 a\n      1 b\n"


@pytest.mark.parametrize("script", [
    "", "   ", "#", "'${'=", "\"", "'", "$(", "${", "${X", "|", ";;", "&&", "a |", "if", "fi", "done", "for", "((", ")",
    "echo ${X:?}", "echo ${#}", "echo $'\\x'", "[ ]", "[ -z", "test 1 -eq a", "exit x", "cd", "break", "read",
    "set -o nosuch", "printf %z", "echo \\", "\x00", "ls -Z", "grep '['", "\n\n;", "while false; do :; done", "${X:-'}'}",
])
@pytest.mark.parametrize("container", [ALPINE, DEBIAN])
def test_odd_scripts_never_raise(container: Container, script: str) -> None:
    for shell in ("sh", "bash") if "bash" in (container.executables or ()) else ("sh",):
        result = sh(container, script, shell)
        assert isinstance(result, ExecResult)
        assert result.code != 70, result.stderr


def _writable(executables: tuple[str, ...]) -> Container:
    """A container with an emptyDir at /data (holding ``seed``), a read-only ConfigMap mount at /etc/otelcol."""
    tree = _tree()
    tree.files["/data/seed"] = b"one\n"
    tree.directories.add("/data")
    tree.writable = {"/data": WritableMount("scratch")}
    tree.read_only = frozenset({"/etc/otelcol"})
    tree.modelled = tree.modelled | {"/data"}
    return Container("collector-0", "otel", "otelcol", "example/otelcol:1", "collector-0", ENV, tree, executables, now=1796542620.0)


FILE_PROGRAMS = ("cp", "mkdir", "rm", "touch", "tee", "ls", "cat")


def test_a_script_writes_the_emptydir_and_reads_back_what_it_wrote() -> None:
    box = _writable(("sh", "ash", *FILE_PROGRAMS, "echo"))
    script = ("echo two >> /data/seed; echo new > /data/new; mkdir -p /data/a/b; cp /data/seed /data/a/b/; touch /data/t; "
              "echo piped | tee /data/p >/dev/null; rm /data/new; ls -R /data; cat /data/a/b/seed")
    result = sh(box, script)
    assert result.stderr == b"" and result.code == 0
    assert result.stdout.decode().split("\n\n")[0].splitlines() == ["/data:", "a", "p", "seed", "t"]
    assert result.stdout.endswith(b"one\ntwo\n")
    written = box.files.written()["/data"]
    assert dict(written.files) == {"seed": b"one\ntwo\n", "a/b/seed": b"one\ntwo\n", "t": b"", "p": b"piped\n"}
    assert written.directories == frozenset({"a", "a/b"})


@pytest.mark.parametrize(("shell", "executables", "missing_dir", "read_only"), [
    ("sh", ("sh", "ash"), "sh: can't create /data/no/f: nonexistent directory",
     "sh: can't create /etc/otelcol/x: Read-only file system"),
    ("sh", ("sh", "dash"), "sh: 1: cannot create /data/no/f: Directory nonexistent",
     "sh: 1: cannot create /etc/otelcol/x: Read-only file system"),
    ("bash", ("sh", "bash"), "bash: line 1: /data/no/f: No such file or directory",
     "bash: line 1: /etc/otelcol/x: Read-only file system"),
])
def test_a_redirection_that_cannot_create_its_file_says_why_as_the_shell_does(
        shell: str, executables: tuple[str, ...], missing_dir: str, read_only: str) -> None:
    box = _writable(executables)
    assert sh(box, "echo x > /data/no/f", shell) == ExecResult(b"", (missing_dir + "\n").encode(), 1)
    assert sh(box, "echo x > /etc/otelcol/x", shell) == ExecResult(b"", (read_only + "\n").encode(), 1)
    kept = sh(box, "echo x > /var/log/x", shell)
    assert "does not keep files written in containers" in kept.stderr.decode() and kept.code == 1
    assert box.files.written() == {}


def test_file_programs_fail_with_gnu_or_busybox_words() -> None:
    gnu, busybox = _writable(("sh", "bash", *FILE_PROGRAMS)), _writable(("sh", "ash", *FILE_PROGRAMS))
    assert run(gnu, "cp", "/data/nope", "/data/x").stderr == b"cp: cannot stat '/data/nope': No such file or directory\n"
    assert run(busybox, "cp", "/data/nope", "/data/x").stderr == b"cp: can't stat '/data/nope': No such file or directory\n"
    assert run(gnu, "cp", "/data/seed", "/etc/otelcol/seed").stderr == (
        b"cp: cannot create regular file '/etc/otelcol/seed': Read-only file system\n")
    assert run(gnu, "cp", "/data", "/data/copy").stderr == b"cp: -r not specified; omitting directory '/data'\n"
    assert run(gnu, "mkdir", "/data").stderr == b"mkdir: cannot create directory '/data': File exists\n"
    assert run(busybox, "mkdir", "/data/a/b").stderr == b"mkdir: can't create directory '/data/a/b': No such file or directory\n"
    assert run(gnu, "rm", "/data/nope") == ExecResult(b"", b"rm: cannot remove '/data/nope': No such file or directory\n", 1)
    assert run(gnu, "rm", "-f", "/data/nope") == ExecResult(b"", b"", 0)
    assert run(busybox, "rm", "/etc/otelcol/config.yaml").stderr == b"rm: can't remove '/etc/otelcol/config.yaml': Read-only file system\n"
    assert run(gnu, "touch", "/data/no/t").stderr == b"touch: cannot touch '/data/no/t': No such file or directory\n"
    assert run(busybox, "tee", "/etc/otelcol/t", stdin=b"x\n") == ExecResult(
        b"x\n", b"tee: can't open '/etc/otelcol/t': Read-only file system\n", 1)
    assert gnu.files.written() == {} and busybox.files.written() == {}


DEBIAN_WITH_SED = _container(("sh", "bash", "dash", "cat", "sed"))


@pytest.mark.parametrize(("args", "stdin", "stdout"), [
    (["-n", "2p"], b"a\nb\nc\n", b"b\n"),
    (["s/b/X/"], b"abcb\nb\n", b"aXcb\nX\n"),
    (["s/b/X/g;2d"], b"abcb\nb\nzz", b"aXcX\nzz"),
    (["s/b/X/2"], b"bbb\n", b"bXb\n"),
    (["-E", r"s/(a)(b)/\2\1&/"], b"abc\n", b"baabc\n"),
    ([r"s/\(a\)*$/[\1]/"], b"baa\n", b"b[a]\n"),
    (["s|/|_|g"], b"/a/b\n", b"_a_b\n"),
    (["/b/,/d/d"], b"a\nb\nc\nd\ne\n", b"a\ne\n"),
    (["2,3!d"], b"a\nb\nc\nd\n", b"b\nc\n"),
    (["-n", "$="], b"a\nb\nc\n", b"3\n"),
    (["2q"], b"a\nb\nc\n", b"a\nb\n"),
    (["/b/{s/b/B/;p}"], b"a\nb\n", b"a\nB\nB\n"),
    (["1i\\\nhead"], b"a\n", b"head\na\n"),
    (["$a tail"], b"a\nb\n", b"a\nb\ntail\n"),
    (["2c\\\nTWO"], b"a\nb\n", b"a\nTWO\n"),
    (["y/abc/xyz/"], b"aabbcc\n", b"xxyyzz\n"),
    (["-e", "s/a/b/", "--expression=s/b/c/", "-n", "-e", "p"], b"a\n", b"c\n"),
    (["-n", "/Variant/Ip"], b'{"defaultVariant": "on"}\nx\n', b'{"defaultVariant": "on"}\n'),
])
def test_sed_edits_a_stream_as_gnu_sed_does(args: list[str], stdin: bytes, stdout: bytes) -> None:
    assert run(DEBIAN_WITH_SED, "sed", *args, stdin=stdin) == ExecResult(stdout, b"", 0)


@pytest.mark.parametrize(("args", "message", "code"), [
    (["s/a/b"], "sed: -e expression #1, char 5: unterminated `s' command", 1),
    (["s/a/b/z"], "sed: -e expression #1, char 7: unknown option to `s'", 1),
    (["k"], "sed: -e expression #1, char 1: unknown command: `k'", 1),
    (["p", "/etc/nope"], "sed: /etc/nope: the itbench_gym twin does not model what is here", 2),
    (["p", "/etc/otelcol/nope"], "sed: can't read /etc/otelcol/nope: No such file or directory", 2),
    ([], "Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...", 1),
])
def test_sed_refuses_what_gnu_sed_refuses(args: list[str], message: str, code: int) -> None:
    result = run(DEBIAN_WITH_SED, "sed", *args)
    assert result.stderr.decode().startswith(message) and result.code == code


def test_sed_says_which_commands_the_twin_does_not_run() -> None:
    result = run(DEBIAN_WITH_SED, "sed", "1h;G")
    assert result.code == 1 and "the itbench_gym twin does not emulate sed's `h' command" in result.stderr.decode()


def test_sed_in_place_rewrites_an_emptydir_file_and_keeps_a_backup() -> None:
    box = _writable(("sh", "bash", "sed", "cat"))
    assert run(box, "sed", "-i.bak", "s/one/ONE/", "/data/seed") == ExecResult(b"", b"", 0)
    assert run(box, "cat", "/data/seed", "/data/seed.bak").stdout == b"ONE\none\n"
    assert run(box, "sed", "--in-place", "s/ONE/1/", "/data/seed") == ExecResult(b"", b"", 0)
    assert run(box, "cat", "/data/seed").stdout == b"1\n"
    assert run(box, "sed", "-i", "s/a/b/", "/etc/otelcol/config.yaml").stderr.decode().startswith(
        "sed: couldn't open temporary file /etc/otelcol/sed")
    assert set(box.files.written()["/data"].files) == {"seed", "seed.bak"}


def test_grep_context_lines_are_grouped_as_gnu_grep_groups_them() -> None:
    assert run(DEBIAN, "grep", "-A1", "b", stdin=b"a\nb\nc\nd\nb\ne\nf\n").stdout == b"b\nc\n--\nb\ne\n"
    assert run(DEBIAN, "grep", "-n", "-C1", "x", stdin=b"1\n2\nx\n4\n5\n6\nx\n").stdout == b"2-2\n3:x\n4-4\n--\n6-6\n7:x\n"
    assert run(DEBIAN, "grep", "-B2", "x", stdin=b"x\n2\nx\n").stdout == b"x\n2\nx\n"
    assert run(DEBIAN, "grep", "-A", "z", "x", stdin=b"x\n") == ExecResult(b"", b"grep: z: invalid context length argument\n", 2)


def test_copies_onto_themselves_and_removing_a_mount_point_fail_as_coreutils_do() -> None:
    box = _writable(("sh", "bash", *FILE_PROGRAMS))
    assert run(box, "cp", "/data/seed", "/data/seed").stderr == b"cp: '/data/seed' and '/data/seed' are the same file\n"
    assert run(box, "cp", "-r", "/data", "/data/sub").stderr == b"cp: cannot copy a directory, '/data', into itself, '/data/sub'\n"
    assert run(box, "rm", "-r", "/data") == ExecResult(b"", b"rm: cannot remove '/data': Device or resource busy\n", 1)
    assert run(box, "ls", "/data") == ExecResult(b"", b"", 0)  # emptied: the mount point itself stays


def test_mv_renames_within_the_emptydir_and_refuses_read_only_sources() -> None:
    box = _writable(("sh", "bash", "mv", *FILE_PROGRAMS))
    assert sh(box, "mkdir /data/d && mv /data/seed /data/d/ && mv /data/d /data/e && ls -R /data", "bash") == ExecResult(
        b"/data:\ne\n\n/data/e:\nseed\n", b"", 0)
    assert run(box, "mv", "/data/nope", "/data/x").stderr == b"mv: cannot stat '/data/nope': No such file or directory\n"
    assert run(box, "mv", "/etc/otelcol/config.yaml", "/data/c").stderr == (
        b"mv: cannot move '/etc/otelcol/config.yaml' to '/data/c': Read-only file system\n")
    assert run(box, "mv", "/data/e", "/data/e/f").stderr == b"mv: cannot move '/data/e' to a subdirectory of itself, '/data/e/f'\n"
    assert set(box.files.written()["/data"].files) == {"e/seed"}


def test_uname_shows_the_nodes_kernel_and_the_containers_hostname() -> None:
    box = Container("collector-0", "otel", "otelcol", "example/otelcol:1", "collector-0", ENV, _tree(), ("uname",),
                    kernel=("6.8.0-85-generic", "#1 SMP", "aarch64"))
    assert run(box, "uname") == ExecResult(b"Linux\n", b"", 0)
    assert run(box, "uname", "-a").stdout == b"Linux collector-0 6.8.0-85-generic #1 SMP aarch64 GNU/Linux\n"
    assert run(box, "uname", "-rm").stdout == b"6.8.0-85-generic aarch64\n"
    assert run(box, "uname", "-p").stdout == b"unknown\n"
    assert "does not know the kernel" in run(_container(("uname",)), "uname", "-r").stderr.decode()


def test_grep_r_searches_a_mount_as_it_is_laid_out_and_says_what_it_cannot_search() -> None:
    # -r skips the atomic writer's links, so a ConfigMap volume's keys show under their timestamped directory
    assert run(DEBIAN, "grep", "-r", "grpc", "/etc/otelcol").stdout == f"/etc/otelcol/{STAMP}/config.yaml:      grpc:\n".encode()
    followed = run(DEBIAN, "grep", "-R", "relay", "/etc/otelcol").stdout.decode().splitlines()
    assert followed == [f"/etc/otelcol/{STAMP}/relay.yaml:relay: true", "/etc/otelcol/..data/relay.yaml:relay: true",
                        "/etc/otelcol/relay.yaml:relay: true"]
    partial = run(DEBIAN, "grep", "-rl", "localhost", "/etc")
    assert partial.stdout == b"/etc/hosts\n" and partial.code == 2 and UNMODELLED in partial.stderr.decode()


#: A container whose memory limit leaves an exec'd process 1 MiB.
LIMITED = replace(_writable(("sh", "dash", "sed", "wc", "cat", "printf")), memory_room=2**20)
UNLIMITED = _writable(("sh", "dash", "sed", "wc", "cat", "printf"))


@pytest.mark.parametrize("script", [
    "x=a; while true; do x=$x$x; done; echo never",      # a variable doubling
    "printf '%900000000s' x; echo never",                  # a field as wide as its width (printf is a builtin)
    "printf '%.900000000f' 1; echo never",
])
def test_a_process_past_its_memory_is_killed_and_the_twin_never_holds_more_than_its_ceiling(script: str) -> None:
    """The OOM killer ends a shell holding more than its container's limit leaves it (137, nothing
    said); without a limit the twin stops it at what it holds, and says so (it never takes the host's memory)."""
    killed = sh(LIMITED, script)
    assert (killed.code, killed.stderr, b"never" in killed.stdout) == (137, b"", False)
    stopped = sh(UNLIMITED, script)
    assert stopped.code == 2 and b"never" not in stopped.stdout
    assert stopped.stderr.decode() == f"itbench_gym: the twin holds at most {EXEC_DATA_CEILING // 2**20} MiB of an exec'd process's data, output and files; this command went past it\n"


def test_a_killed_subshell_or_program_leaves_the_shell_running() -> None:
    """The OOM killer takes the largest process: a command substitution, a pipeline's stage or a program
    (sed multiplying its input) ends with 137 and the script goes on."""
    result = sh(LIMITED, "x=$(printf '%2000000s' x); echo sub $? ${#x}; printf '%2000000s' x | wc -c; "
                         "printf '%200000s' x | sed 's/ /&&&&&&&&/g' | wc -c; echo end")
    assert result.stdout.decode().split() == ["sub", "137", "0", "0", "0", "end"]
    assert result.code == 0


def test_a_file_grows_only_to_what_the_twin_holds() -> None:
    """An emptyDir file is disk, not the process's memory (the limit does not bound it); the twin keeps
    at most its ceiling of it."""
    box = replace(_writable(("sh", "dash", "printf", "cat")), memory_room=2**20)
    result = sh(box, "while true; do printf '%500000s' x >> /data/big; done")
    assert result.code == 2 and b"the twin holds at most" in result.stderr
    assert EXEC_DATA_CEILING - 500_000 < len(box.files.written()["/data"].files["big"]) <= EXEC_DATA_CEILING


def test_pattern_removal_cuts_the_shortest_or_longest_match_as_trying_every_prefix_and_suffix_does() -> None:
    """``${x#p}``, ``${x##p}``, ``${x%p}``, ``${x%%p}`` against their definition (the shortest or longest
    prefix or suffix the pattern matches, tried one by one), over random patterns and values."""
    import random
    import re

    def expected(value: str, pattern: str, op: str) -> str:
        rx = re.compile("".join({"*": ".*", "?": "."}.get(c, "[ab]" if c == "%" else re.escape(c)) for c in pattern), re.DOTALL)
        if op.startswith("#"):
            cuts = [k for k in range(len(value) + 1) if rx.fullmatch(value[:k])]
            return value[(cuts[-1] if op == "##" else cuts[0]):] if cuts else value
        cuts = [k for k in range(len(value) + 1) if rx.fullmatch(value[k:])]
        return value[:(cuts[0] if op == "%%" else cuts[-1])] if cuts else value

    rnd = random.Random(7)
    for _ in range(300):
        value = "".join(rnd.choice("ab") for _ in range(rnd.randint(0, 8)))
        pattern = "".join(rnd.choice("*?ab%") for _ in range(rnd.randint(1, 4)))
        op = rnd.choice(["#", "##", "%", "%%"])
        result = sh(DEBIAN, f"x={value}; printf '[%s]' \"${{x{op}{pattern.replace('%', '[ab]')}}}\"")
        assert result.stdout.decode() == f"[{expected(value, pattern, op)}]", (value, op, pattern)
    # quoted pattern characters match themselves
    assert sh(DEBIAN, "x='*ab*'; printf '%s %s' \"${x#\"*\"}\" \"${x%%'*'}\"").stdout == b"ab* *ab"


def test_a_loop_over_large_data_ends_within_the_step() -> None:
    """The twin runs an exec'd process within one step, so its shell stops a script once it has moved
    a bounded amount of data (the loop limit alone would let 10,000 passes over 8 MB run for minutes)."""
    result = sh(UNLIMITED, 'x=$(printf "%4000000s" y); while true; do echo "$x" > /dev/null; done')
    assert result.code == 2
    assert result.stderr.decode() == (f"itbench_gym: the twin's shell moves at most {EXEC_WORK_CEILING // 2**20} MiB of data for one "
                                      "exec'd process (it runs within one step); this command went past it\n")
