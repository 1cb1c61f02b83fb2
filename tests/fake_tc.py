"""A stand-in for tc's memory in tests that run no commands: :class:`TcEcho` remembers the
class and qdisc lines a fake runner is given, per (namespace, device), and answers
``tc class show`` / ``tc qdisc show`` the way tc prints them (rates in ``bit``, delays in
``us``, as they were set), so the shapers' read-back check sees what was set."""

from __future__ import annotations

import json


def _split(argv: list[str]) -> tuple[str | None, list[str]]:
    if argv[:3] == ["ip", "netns", "exec"]:
        return argv[3], argv[4:]
    return None, argv


def _without_options(tc: list[str]) -> list[str]:
    """``tc -s -j qdisc show ...`` as ``tc qdisc show ...``."""
    return tc[:1] + [w for w in tc[1:] if not (w.startswith("-") and len(w) == 2)]


def _sysctl_key(path: str) -> str:
    """The sysctl a ``/proc/sys`` file holds (the inverse of decobench.netem.tcp.proc_path)."""
    return path.removeprefix("/proc/sys/").replace("/", ".")


LINUX_DEFAULTS = {"net.ipv4.tcp_slow_start_after_idle": "1",
                  "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
                  "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
                  "net.ipv4.tcp_congestion_control": "bbr",     # this project's hosts' default
                  "net.ipv4.tcp_available_congestion_control": "reno bbr cubic"}

ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
"""One list per host, written only from the initial namespace (None here)."""


class TcEcho:
    """``allowed``: the host's allowed congestion control algorithms; a namespace's write of
    an algorithm not in it is refused, as the kernel does ("reno bbr": issue 38's host)."""

    def __init__(self, allowed: str = "reno cubic") -> None:
        self.allowed = allowed
        self.allowed_writes: list[str] = []          # every value written to the list
        self.classes: dict[tuple, dict[str, str]] = {}
        self.qdiscs: dict[tuple, dict[str, str]] = {}
        self.rules: dict[str | None, list[str]] = {}  # iptables INPUT rules per namespace
        self.routes: dict[tuple, str] = {}            # (namespace, device) -> route line
        self.sysctls: dict[tuple, str] = {}           # (namespace, key) -> value
        self.drops: dict[tuple, int] = {}             # (namespace, device) -> drops to report
        self.retransmits: dict[str | None, int] = {}  # namespace -> TCP RetransSegs to report

    @staticmethod
    def is_tuning(argv: list[str]) -> bool:
        """The TCP tuning's commands (decobench.netem.tcp): routes and the sysctl."""
        _, words = _split(list(argv))
        return words[:2] == ["ip", "route"] or (
            words[:1] in (["cat"], ["sh"]) and "/proc/sys/" in " ".join(words))

    def _tuning(self, ns: str | None, words: list[str]) -> str:
        if words[:1] == ["cat"]:                    # cat /proc/sys/net/ipv4/KEY...
            return "".join((self.allowed if key == ALLOWED else
                            self.sysctls.get((ns, key), LINUX_DEFAULTS.get(key, "1"))) + "\n"
                           for key in map(_sysctl_key, words[1:]))
        if words[:1] == ["sh"]:                     # sh -c "echo VALUE > /proc/sys/..."
            from decobench.netem.netns import CommandError

            value, path = words[2].removeprefix("echo ").split(" > ")
            key = _sysctl_key(path)
            if key == ALLOWED:
                if ns is not None:
                    raise CommandError(words, 2, f"sh: 1: cannot create {path}: Permission "
                                                 "denied")
                self.allowed = value
                self.allowed_writes.append(value)
                return ""
            if (key == "net.ipv4.tcp_congestion_control" and ns is not None
                    and value not in self.allowed.split()):
                raise CommandError(words, 2, "sh: 1: echo: echo: I/O error")
            self.sysctls[(ns, key)] = value.replace(" ", "\t")
            return ""
        dev = words[words.index("dev") + 1]
        if words[2] == "show":
            line = self.routes.get((ns, dev), "10.77.0.0/24 proto kernel scope link src 10.77.0.1")
            return line + "\n"
        if words[2] == "change":                    # ip route change ROUTE... dev D ...
            rest = words[3:]
            at = rest.index("dev")
            self.routes[(ns, dev)] = " ".join(rest[:at] + rest[at + 2:])
        return ""

    @staticmethod
    def is_read(argv: list[str]) -> bool:
        _, words = _split(list(argv))
        tc = _without_options(words) if words[:1] == ["tc"] else words
        return (tc[:1] == ["tc"] and len(tc) > 2 and tc[2] == "show") or (
            words[:1] == ["iptables"] and "-S" in words) or (
            words[:1] == ["cat"] and "/proc/net/snmp" in words)

    def _iptables(self, ns: str | None, words: list[str]) -> str:
        rules = self.rules.setdefault(ns, [])
        words = [w for w in words if w != "-w"]
        if words[:1] == ["-S"]:
            return "-P INPUT ACCEPT\n" + "".join(f"-A INPUT {r}\n" for r in rules)
        if words[:1] == ["-I"]:
            rules.insert(int(words[2]) - 1, " ".join(words[3:]))
        elif words[:1] == ["-A"]:
            rules.append(" ".join(words[2:]))
        elif words[:1] == ["-D"]:
            rules.remove(" ".join(words[2:]))
        return ""

    def answer(self, argv: list[str]) -> str:
        ns, tc = _split(list(argv))
        if self.is_tuning(argv):
            return self._tuning(ns, tc)
        if tc[:1] == ["iptables"]:
            return self._iptables(ns, tc[1:])
        if tc[:1] == ["cat"] and "/proc/net/snmp" in tc:   # the namespace's TCP counters
            return (f"Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 {self.retransmits.get(ns, 0)} 0\n"
                    "TcpExt: TCPLossProbes TCPTimeouts\nTcpExt: 2 1\n")
        if tc[:1] != ["tc"] or "dev" not in tc:
            return ""
        if "-j" in tc:                              # tc -s -j qdisc show dev D: counters
            key = (ns, tc[tc.index("dev") + 1])
            return json.dumps([{"kind": line.split()[1], "handle": line.split()[2],
                                "bytes": 1000, "packets": 10, "drops": self.drops.get(key, 0),
                                "overlimits": 0, "requeues": 0}
                               for line in self.qdiscs.get(key, {}).values()])
        tc = _without_options(tc)
        kind, verb, key = tc[1], tc[2], (ns, tc[tc.index("dev") + 1])
        if verb == "show":
            table = self.classes if kind == "class" else self.qdiscs
            return "\n".join(table.get(key, {}).values()) + "\n"
        if kind == "class" and verb in ("add", "change"):
            classid, parent = tc[tc.index("classid") + 1], tc[tc.index("parent") + 1]
            where = "root" if parent == "1:" else f"parent {parent}"
            self.classes.setdefault(key, {})[classid] = (
                f"class htb {classid} {where} rate {tc[tc.index('rate') + 1]} "
                f"ceil {tc[tc.index('ceil') + 1]}")
        elif kind == "qdisc" and verb in ("add", "change"):
            handle = tc[tc.index("handle") + 1]
            if "root" in tc:
                line = f"qdisc {tc[tc.index(handle) + 1]} {handle} root refcnt 2"
            else:
                rest = tc[tc.index(handle) + 1:]
                line = (f"qdisc {rest[0]} {handle} parent {tc[tc.index('parent') + 1]} "
                        + " ".join(rest[1:]))
            self.qdiscs.setdefault(key, {})[handle] = line
        elif kind == "qdisc" and verb == "del":
            self.classes.pop(key, None)
            self.qdiscs.pop(key, None)
        return ""
