"""``systemctl``, ``rpm``, ``sysctl``, ``getenforce``, ``sshd -T``, ``uname`` and ``sudo`` for a modelled host, run inside the sandbox.

No systemd, rpm database or RHEL kernel exists under the agent's playbook: these commands answer from
the host model (``state.json`` written next to this program by ``hosts.commands``) and from the
sandbox's /proc/sys (the model's runtime values). They print what RHEL 9's tools print for the queries an
assessment makes, with the same exit statuses; anything that would change the host is refused, saying so.

Standalone on purpose (standard library only): it runs in the sandbox with ``python -I``, where the
itbench_gym package is not on the path. The program's name (argv[0]) selects the command.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

#: Where ``hosts.commands`` puts the model's state inside the sandbox (/usr/local is its folder).
STATE_FILE = Path("/usr/local/lib/itbench-host/state.json")
_SYSTEMD_VERSION = "systemd 252 (252-32.el9_4)\n+PAM +AUDIT +SELINUX -APPARMOR +IMA +SMACK +SECCOMP +GCRYPT +GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN -IPTC +KMOD +LIBCRYPTSETUP +LIBFDISK +PCRE2 -PWQUALITY +P11KIT -QRENCODE +TPM2 +BZIP2 +LZ4 +XZ +ZLIB +ZSTD -BPF_FRAMEWORK +XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified"
_CHANGING_VERBS = {"start", "stop", "restart", "reload", "try-restart", "reload-or-restart", "try-reload-or-restart", "enable",
                   "disable", "reenable", "mask", "unmask", "daemon-reload", "daemon-reexec", "kill", "reset-failed", "isolate",
                   "set-property", "preset", "edit", "revert", "link", "set-default", "reboot", "poweroff", "halt"}
_RUNNING_OK = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated"}
_SYSCTL_ROOT = Path("/proc/sys")


def _state() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(STATE_FILE.read_text(encoding="utf-8"))
    return loaded


def _err(message: str) -> None:
    sys.stderr.write(message + "\n")


# -- systemctl ------------------------------------------------------------------------------------

def _unit(name: str) -> str:
    return name if re.search(r"\.(service|socket|target|timer|mount|path|slice|scope|device|swap|automount)$", name) else f"{name}.service"


def _sub(unit: dict[str, Any]) -> str:
    if unit["active"] == "active":
        return "mounted" if unit["name"].endswith(".mount") else ("active" if unit["name"].endswith(".target") else "running")
    return "failed" if unit["active"] == "failed" else "dead"


def _load(unit: dict[str, Any] | None) -> str:
    if unit is None:
        return "not-found"
    return "masked" if unit["enabled"] == "masked" else "loaded"


def _show(name: str, unit: dict[str, Any] | None) -> dict[str, str]:
    fragment = f"/usr/lib/systemd/system/{name}" if unit is not None and unit["enabled"] != "masked" else ""
    return {
        "Id": name, "Names": name, "Description": (unit or {}).get("description") or name,
        "LoadState": _load(unit), "ActiveState": (unit or {}).get("active", "inactive"),
        "SubState": _sub(unit) if unit is not None else "dead", "FragmentPath": fragment,
        "UnitFileState": (unit or {}).get("enabled", ""), "UnitFilePreset": "disabled" if unit is not None else "",
        "CanStart": "yes" if unit is not None and unit["enabled"] != "masked" else "no",
        "MainPID": "0",
    }


def systemctl(argv: list[str]) -> int:
    """The read-only verbs an assessment uses: is-enabled, is-active, is-failed, status, show, list-units, list-unit-files."""
    units = {u["name"]: u for u in _state()["services"]}
    words: list[str] = []
    props: list[str] = []
    unit_type: str | None = None
    flags: set[str] = set()
    states: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("-p", "--property") and i < len(argv):
            props += argv[i].split(",")
            i += 1
        elif arg.startswith("--property="):
            props += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-p") and len(arg) > 2:
            props += arg[2:].split(",")
        elif arg in ("-t", "--type") and i < len(argv):
            unit_type = argv[i]
            i += 1
        elif arg.startswith("--type="):
            unit_type = arg.split("=", 1)[1]
        elif arg.startswith("--state="):
            states += arg.split("=", 1)[1].split(",")
        elif arg == "--version":
            print(_SYSTEMD_VERSION)
            return 0
        elif arg.startswith("-"):
            flags.add({"-a": "--all", "-q": "--quiet", "-l": "--full"}.get(arg, arg))
        else:
            words.append(arg)
    verb = words[0] if words else "list-units"
    names = [_unit(w) for w in words[1:]]
    quiet = "--quiet" in flags
    if verb in _CHANGING_VERBS:
        _err(f"Failed to {verb} {' '.join(names) or 'the system'}: this host is being assessed, not changed "
             "(its state is read-only to the agent)")
        return 1
    if verb == "is-enabled":
        if not names:
            _err("Too few arguments.")
            return 1
        ok = True
        for name in names:
            unit = units.get(name)
            if unit is None:
                _err(f"Failed to get unit file state for {name}: No such file or directory")
                ok = False
                continue
            if not quiet:
                print(unit["enabled"])
            ok = ok and unit["enabled"] in _RUNNING_OK
        return 0 if ok else 1
    if verb in ("is-active", "is-failed"):
        if not names:
            _err("Too few arguments.")
            return 1
        found = []
        for name in names:
            state = units.get(name, {}).get("active", "inactive")
            found.append(state)
            if not quiet:
                print(state)
        if verb == "is-active":
            return 0 if all(s == "active" for s in found) else 3
        return 0 if any(s == "failed" for s in found) else 1
    if verb == "status":
        return _status(names, units)
    if verb == "show":
        for index, name in enumerate(names or ["-.slice"]):
            values = _show(name, units.get(name))
            if index:
                print()
            for key, value in values.items():
                if props and key not in props:
                    continue
                print(value if "--value" in flags else f"{key}={value}")
        return 0
    if verb == "list-units":
        return _list_units(units, unit_type, flags, states, names)
    if verb == "list-unit-files":
        return _list_unit_files(units, unit_type, flags, states, names)
    if verb == "cat":
        for name in names:
            if name not in units:
                _err(f"No files found for {name}.")
                return 1
            print(f"# /usr/lib/systemd/system/{name}\n[Unit]\nDescription={units[name].get('description') or name}\n")
        return 0
    if verb == "get-default":
        print("multi-user.target")
        return 0
    if verb == "is-system-running":
        print("running")
        return 0
    _err(f"Unknown command verb {verb}.")
    return 1


def _status(names: list[str], units: dict[str, dict[str, Any]]) -> int:
    if not names:
        print("● rhel9-host\n    State: running\n    Units: loaded\n     Jobs: 0 queued\n   Failed: 0 units")
        return 0
    worst = 0
    for name in names:
        unit = units.get(name)
        if unit is None:
            _err(f"Unit {name} could not be found.")
            worst = max(worst, 4)
            continue
        loaded = "masked (Reason: Unit " + name + " is masked.)" if unit["enabled"] == "masked" else \
            f"loaded (/usr/lib/systemd/system/{name}; {unit['enabled']}; preset: disabled)"
        dot = "●" if unit["active"] == "active" else ("×" if unit["active"] == "failed" else "○")
        print(f"{dot} {name} - {unit.get('description') or name}\n     Loaded: {loaded}\n     Active: {unit['active']} ({_sub(unit)})\n")
        if unit["active"] != "active":
            worst = max(worst, 3)
    return worst


def _type_ok(name: str, unit_type: str | None) -> bool:
    return unit_type is None or any(name.endswith("." + t) for t in unit_type.split(","))


def _list_units(units: dict[str, dict[str, Any]], unit_type: str | None, flags: set[str], states: list[str], patterns: list[str]) -> int:
    rows = []
    for name, unit in sorted(units.items()):
        if "@." in name or not _type_ok(name, unit_type):
            continue
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        values = (_load(unit), unit["active"], _sub(unit))
        if states and not set(states) & set(values):
            continue
        if not states and "--all" not in flags and unit["active"] == "inactive":
            continue
        rows.append((name, *values, unit.get("description") or name))
    width = max([len(r[0]) for r in rows] + [4])
    bullet = "" if "--plain" in flags else "  "
    lines = [] if "--no-legend" in flags else [f"{bullet}{'UNIT':<{width}} LOAD      ACTIVE   SUB     DESCRIPTION"]
    lines += [f"{bullet}{r[0]:<{width}} {r[1]:<9} {r[2]:<8} {r[3]:<7} {r[4]}" for r in rows]
    if "--no-legend" not in flags:
        lines += ["", "LOAD   = Reflects whether the unit definition was properly loaded.",
                  "ACTIVE = The high-level unit activation state, i.e. generalization of SUB.",
                  "SUB    = The low-level unit activation state, values depend on unit type.",
                  f"{len(rows)} loaded units listed."]
    print("\n".join(lines))
    return 0


def _list_unit_files(units: dict[str, dict[str, Any]], unit_type: str | None, flags: set[str], states: list[str], patterns: list[str]) -> int:
    rows = [(n, u["enabled"]) for n, u in sorted(units.items()) if _type_ok(n, unit_type)
            and (not patterns or any(fnmatch.fnmatch(n, p) for p in patterns)) and (not states or u["enabled"] in states)]
    width = max([len(r[0]) for r in rows] + [9])
    lines = [] if "--no-legend" in flags else [f"{'UNIT FILE':<{width}} STATE    PRESET"]
    lines += [f"{n:<{width}} {s:<8} {'disabled' if s != 'static' else '-'}" for n, s in rows]
    if "--no-legend" not in flags:
        lines += ["", f"{len(rows)} unit files listed."]
    print("\n".join(lines))
    return 0


# -- rpm ------------------------------------------------------------------------------------------

_TAG = re.compile(r"%(-?\d*)\{(\w+)(?::\w+)?\}")


def _tag(package: dict[str, Any], tag: str) -> str:
    tag = tag.upper()
    epoch = package.get("epoch")
    nvr = f"{package['name']}-{package['version']}-{package['release']}"
    values = {"NAME": package["name"], "VERSION": package["version"], "RELEASE": package["release"], "ARCH": package["arch"],
              "EPOCH": "(none)" if epoch is None else str(epoch), "EPOCHNUM": str(epoch or 0), "NVR": nvr,
              "NEVR": nvr if epoch is None else f"{package['name']}-{epoch}:{package['version']}-{package['release']}",
              "NVRA": f"{nvr}.{package['arch']}", "NEVRA": f"{nvr}.{package['arch']}" if epoch is None else
              f"{package['name']}-{epoch}:{package['version']}-{package['release']}.{package['arch']}",
              "SUMMARY": package["name"], "VENDOR": "Red Hat, Inc.", "PACKAGER": "Red Hat, Inc. <http://bugzilla.redhat.com/bugzilla>",
              "LICENSE": "(unknown)", "INSTALLTIME": "1716192000", "BUILDTIME": "1712000000"}
    return str(values.get(tag, "(none)"))


def _format(package: dict[str, Any], fmt: str) -> str:
    text = _TAG.sub(lambda m: f"{_tag(package, m.group(2)):{'<' if m.group(1).startswith('-') else '>'}{m.group(1).lstrip('-') or 0}}", fmt)
    return text.replace("\\n", "\n").replace("\\t", "\t")


def rpm(argv: list[str]) -> int:
    """``rpm -q NAME...``, ``-qa [GLOB]``, ``-qi``, ``--queryformat``: queries of the modelled rpm database."""
    packages = {p["name"]: p for p in _state()["packages"]}
    query = info = every = False
    fmt: str | None = None
    names: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("--qf", "--queryformat") and i < len(argv):
            fmt = argv[i]
            i += 1
        elif arg.startswith(("--qf=", "--queryformat=")):
            fmt = arg.split("=", 1)[1]
        elif arg == "--version":
            print("RPM version 4.16.1.3")
            return 0
        elif arg in ("--query",):
            query = True
        elif arg == "--all":
            every = True
        elif arg == "--info":
            info = True
        elif arg in ("--nosignature", "--nodigest", "--quiet"):
            continue
        elif arg.startswith("--"):
            _err(f"rpm: {arg}: this host model answers package queries only (rpm -q, -qa, -qi, --queryformat)")
            return 1
        elif arg.startswith("-"):
            letters = arg[1:]
            if set(letters) - set("qaiV"):
                _err(f"rpm: {arg}: this host model answers package queries only (rpm -q, -qa, -qi, --queryformat)")
                return 1
            if "V" in letters:
                _err("rpm: verifying packages (-V) needs the real files; not available on this host model")
                return 1
            query = query or "q" in letters
            every = every or "a" in letters
            info = info or "i" in letters
        else:
            names.append(arg)
    if not query:
        _err("rpm: no operation specified (this host model answers rpm -q queries)")
        return 1
    if every:
        chosen = [p for n, p in sorted(packages.items()) if not names or any(fnmatch.fnmatch(p["name"], g) or
                                                                            fnmatch.fnmatch(_tag(p, "NVRA"), g) for g in names)]
        for package in chosen:
            sys.stdout.write(_format(package, fmt) if fmt is not None else (_info(package) if info else _tag(package, "NVRA") + "\n"))
        return 0
    if not names:
        _err("rpm: no arguments given for query")
        return 1
    missing = 0
    for name in names:
        package = packages.get(name) or next((p for p in packages.values() if name in (_tag(p, "NVR"), _tag(p, "NVRA"))), None)
        if package is None:
            print(f"package {name} is not installed")
            missing += 1
            continue
        sys.stdout.write(_format(package, fmt) if fmt is not None else (_info(package) if info else _tag(package, "NVRA") + "\n"))
    return min(missing, 255)


def _info(package: dict[str, Any]) -> str:
    return (f"Name        : {package['name']}\nEpoch       : {package['epoch']}\n" if package.get("epoch") is not None else
            f"Name        : {package['name']}\n") + (
        f"Version     : {package['version']}\nRelease     : {package['release']}\nArchitecture: {package['arch']}\n"
        f"Vendor      : Red Hat, Inc.\nSummary     : {package['name']}\n")


# -- sysctl ---------------------------------------------------------------------------------------

def _sysctl_path(name: str) -> Path:
    return _SYSCTL_ROOT.joinpath(*(name.split("/") if "/" in name else name.split(".")))


def sysctl(argv: list[str]) -> int:
    """``sysctl [-n] [-e] [-N] [-a] NAME...``: the running kernel parameters (this host's /proc/sys)."""
    flags: set[str] = set()
    names: list[str] = []
    for arg in argv:
        if arg.startswith("--"):
            long = {"--values": "n", "--ignore": "e", "--names": "N", "--all": "a", "--quiet": "q", "--write": "w",
                    "--load": "p", "--system": "p"}.get(arg.split("=", 1)[0])
            if long is None:
                _err(f"sysctl: unrecognized option '{arg}'")
                return 1
            flags.add(long)
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
        else:
            names.append(arg)
    if "w" in flags or "p" in flags or any("=" in n for n in names):
        key = next((n.split("=", 1)[0] for n in names), "")
        _err(f'sysctl: permission denied on key "{key}"' if key else "sysctl: permission denied: this host is read-only to the assessment")
        return 255 if key else 1
    if "a" in flags or "A" in flags or "X" in flags:
        names = [".".join(p.relative_to(_SYSCTL_ROOT).parts) for p in sorted(_SYSCTL_ROOT.rglob("*")) if p.is_file()]
    if not names:
        _err("sysctl: no variables specified\nTry `sysctl --help' for more information.")
        return 1
    status = 0
    for name in names:
        path = _sysctl_path(name)
        shown = name.replace("/", ".")
        try:
            value = path.read_text(encoding="utf-8").rstrip("\n")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            if "e" not in flags:
                _err(f"sysctl: cannot stat {path}: No such file or directory")
                status = 255
            continue
        if "N" in flags:
            print(shown)
        elif "n" in flags:
            print(value)
        elif "q" not in flags:
            print(f"{shown} = {value}")
    return status


# -- sshd -T ---------------------------------------------------------------------------------------

#: OpenSSH 8.7 (RHEL 9) server defaults as ``sshd -T`` prints them, for keywords the files do not set.
_SSHD_DEFAULTS = {
    "port": "22", "addressfamily": "any", "listenaddress": "[::]:22\nlistenaddress 0.0.0.0:22", "usepam": "no",
    "logingracetime": "120", "x11displayoffset": "10", "maxauthtries": "6", "maxsessions": "10", "clientaliveinterval": "0",
    "clientalivecountmax": "3", "requiredrsasize": "1024", "streamlocalbindmask": "0177", "permitrootlogin": "without-password",
    "ignorerhosts": "yes", "ignoreuserknownhosts": "no", "hostbasedauthentication": "no", "hostbasedusesnamefrompacketonly": "no",
    "pubkeyauthentication": "yes", "kerberosauthentication": "no", "kerberosorlocalpasswd": "yes", "kerberosticketcleanup": "yes",
    "gssapiauthentication": "no", "gssapicleanupcredentials": "yes", "gssapikeyexchange": "no", "gssapistrictacceptorcheck": "yes",
    "gssapistorecredentialsonrekey": "no", "gssapikexalgorithms": "gss-group14-sha256-,gss-group16-sha512-,gss-nistp256-sha256-,gss-curve25519-sha256-,gss-group14-sha1-,gss-gex-sha1-",
    "passwordauthentication": "yes", "kbdinteractiveauthentication": "yes", "printmotd": "yes", "printlastlog": "yes",
    "x11forwarding": "no", "x11uselocalhost": "yes", "permittty": "yes", "permituserrc": "yes", "strictmodes": "yes",
    "tcpkeepalive": "yes", "permitemptypasswords": "no", "compression": "yes", "gatewayports": "no", "usedns": "no",
    "allowtcpforwarding": "yes", "allowagentforwarding": "yes", "disableforwarding": "no", "allowstreamlocalforwarding": "yes",
    "streamlocalbindunlink": "no", "fingerprinthash": "SHA256", "exposeauthinfo": "no", "pidfile": "/var/run/sshd.pid",
    "modulifile": "/etc/ssh/moduli", "xauthlocation": "/usr/bin/xauth", "maxstartups": "10:30:100", "persourcemaxstartups": "none",
    "persourcenetblocksize": "32:128", "permittunnel": "no", "ipqos": "lowdelay throughput", "rekeylimit": "0 0",
    "permitopen": "any", "permitlisten": "any", "permituserenvironment": "no", "pubkeyauthoptions": "none",
    "loglevel": "INFO", "syslogfacility": "AUTH", "authorizedkeysfile": ".ssh/authorized_keys .ssh/authorized_keys2",
    "banner": "none", "chrootdirectory": "none", "versionaddendum": "none", "authorizedkeyscommand": "none",
    "authorizedkeyscommanduser": "none", "authorizedprincipalsfile": "none", "trustedusercakeys": "none", "revokedkeys": "none",
    "securitykeyprovider": "internal", "hostkeyagent": "none", "forcecommand": "none",
    "hostkey": "/etc/ssh/ssh_host_rsa_key\nhostkey /etc/ssh/ssh_host_ecdsa_key\nhostkey /etc/ssh/ssh_host_ed25519_key",
}
#: Keywords that may repeat (every occurrence counts); for all others the first one wins, as in sshd.
_SSHD_MULTI = {"acceptenv", "allowusers", "allowgroups", "denyusers", "denygroups", "hostkey", "listenaddress", "port",
               "subsystem", "setenv", "hostcertificate"}
_SSHD_ALIASES = {"challengeresponseauthentication": "kbdinteractiveauthentication", "skeyauthentication": "kbdinteractiveauthentication",
                 "dsaauthentication": "pubkeyauthentication", "pubkeyacceptedkeytypes": "pubkeyacceptedalgorithms",
                 "hostbasedacceptedkeytypes": "hostbasedacceptedalgorithms"}


def _sshd_lines(path: Path, depth: int = 0) -> list[tuple[str, str]]:
    """(keyword, value) of ``path`` with Include expanded in place, up to the first Match block."""
    if depth > 16:
        raise RecursionError("Include nested too deeply")
    out: list[tuple[str, str]] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.replace("=", " ", 1).split(None, 1) if "=" in line.split(None, 1)[0] else line.split(None, 1)
        keyword, value = parts[0].lower(), (parts[1].strip() if len(parts) > 1 else "")
        if keyword == "match":
            out.append(("match", value))
            break
        if keyword == "include":
            for pattern in value.split():
                full = pattern if pattern.startswith("/") else f"/etc/ssh/{pattern}"
                for included in sorted(Path("/").glob(full.lstrip("/"))):
                    nested = _sshd_lines(included, depth + 1)
                    out += [kv for kv in nested if kv[0] != "match"]
            continue
        out.append((_SSHD_ALIASES.get(keyword, keyword), value))
    return out


def sshd(argv: list[str]) -> int:
    """``sshd -T`` (and ``-t``): the effective server configuration the files give, as OpenSSH 8.7 prints it."""
    config = Path("/etc/ssh/sshd_config")
    test_only = extended = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "-f" and i < len(argv):
            config = Path(argv[i])
            i += 1
        elif arg == "-T":
            extended = True
        elif arg == "-t":
            test_only = True
        elif arg == "-C" and i < len(argv):
            i += 1  # connection parameters only select Match blocks; the global settings are what is printed
        elif arg == "-V":
            _err("OpenSSH_8.7p1, OpenSSL 3.0.7 1 Nov 2022")
            return 0
        else:
            _err("sshd: this host model answers only `sshd -T` and `sshd -t` (the server is not started here)")
            return 1
    if not extended and not test_only:
        _err("sshd: this host model answers only `sshd -T` and `sshd -t` (the server is not started here)")
        return 1
    try:
        lines = [kv for kv in _sshd_lines(config) if kv[0] != "match"]
    except OSError as exc:
        _err(f"{config}: {exc.strerror or exc}")
        return 255
    if test_only and not extended:
        return 0
    settings: dict[str, list[str]] = {}
    for keyword, value in lines:
        if keyword in _SSHD_MULTI:
            settings.setdefault(keyword, []).append(value)
        elif keyword not in settings:
            settings[keyword] = [value]
    shown = {**{k: [v] for k, v in _SSHD_DEFAULTS.items()}, **settings}
    for keyword in sorted(shown):
        for value in shown[keyword]:
            if keyword == "subsystem":
                value = " ".join(value.split())
            elif value.lower() in ("yes", "no") or keyword in ("permitrootlogin", "compression", "addressfamily"):
                value = {"prohibit-password": "without-password"}.get(value.lower(), value.lower())
            print(f"{keyword} {value}")
    return 0


# -- getenforce, sudo -----------------------------------------------------------------------------

def getenforce(_argv: list[str]) -> int:
    """SELinux's mode from /etc/selinux/config (the model boots with what the file says)."""
    mode = "disabled"
    try:
        for line in Path("/etc/selinux/config").read_text(encoding="utf-8").splitlines():
            match = re.match(r"\s*SELINUX\s*=\s*(\w+)", line)
            if match:
                mode = match.group(1).lower()
    except OSError:
        pass
    print({"enforcing": "Enforcing", "permissive": "Permissive"}.get(mode, "Disabled"))
    return 0


def sudo(argv: list[str]) -> int:
    """Run a command as root: the sandbox's user already is root; another target user is refused."""
    user = "root"
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        if arg in ("-u", "-p", "-g", "-C", "-h", "-D", "-r", "-t", "-U", "-T") and i + 1 < len(argv):
            if arg == "-u":
                user = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-u") and len(arg) > 2:
            user = arg[2:]
        elif arg in ("-V", "--version"):
            print("Sudo version 1.9.5p2")
            return 0
        elif arg in ("-v", "-k", "-K"):
            return 0
        elif arg in ("-l", "--list"):
            print("User root may run the following commands on this host:\n    (ALL) ALL")
            return 0
        i += 1
    if user not in ("root", "0", "#0"):
        _err(f"sudo: this host runs commands as root only; cannot run as {user}")
        return 1
    command = argv[i:]
    if not command:
        _err("usage: sudo -h | -K | -k | -V\nusage: sudo [-u user] command")
        return 1
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _err(f"sudo: {command[0]}: command not found" if isinstance(exc, FileNotFoundError) else f"sudo: {command[0]}: {exc.strerror}")
    return 1


def uname(argv: list[str]) -> int:
    """``uname [-snrvmpioa]``: the modelled kernel (the sandbox runs on this machine's, which is not RHEL's)."""
    state = _state()
    kernel = state.get("kernel") or {}
    machine = kernel.get("machine", "x86_64")
    fields = {"s": "Linux", "n": state.get("hostname", "localhost"), "r": kernel.get("release", ""), "v": kernel.get("version", ""),
              "m": machine, "p": machine, "i": machine, "o": "GNU/Linux"}
    long = {"--kernel-name": "s", "--nodename": "n", "--kernel-release": "r", "--kernel-version": "v", "--machine": "m",
            "--processor": "p", "--hardware-platform": "i", "--operating-system": "o", "--all": "a"}
    wanted: list[str] = []
    for arg in argv:
        letters = long.get(arg) or (arg[1:] if arg.startswith("-") and not arg.startswith("--") else None)
        if letters is None or set(letters) - set("snrvmpioa"):
            _err(f"uname: invalid option -- '{arg.lstrip('-')}'\nTry 'uname --help' for more information.")
            return 1
        wanted += list(letters)
    if "a" in wanted:
        wanted = list("snrvmpio")
    order = [f for f in "snrvmpio" if f in wanted] or ["s"]
    print(" ".join(fields[f] for f in order if fields[f]))
    return 0


COMMANDS = {"systemctl": systemctl, "rpm": rpm, "sysctl": sysctl, "getenforce": getenforce, "sudo": sudo, "sshd": sshd, "uname": uname}


def main() -> int:
    name = os.path.basename(sys.argv[0])
    command = COMMANDS.get(name)
    if command is None:
        _err(f"{name}: not a command of this host model ({', '.join(sorted(COMMANDS))})")
        return 127
    try:
        return command(sys.argv[1:])
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
