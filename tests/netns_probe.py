"""Run edgeopt commands in a private network namespace and log every DNS query they send.

Started by tests/test_offline.py as `unshare --net --mount python netns_probe.py OUT ARGS...`
where each ARGS group is one edgeopt command line joined with '\\x1f'. Inside the new
namespaces only the loopback interface exists; /etc/resolv.conf is bind-mounted (in this
mount namespace only) to point at a UDP listener on 127.0.0.1:53 that records each query
name and answers NXDOMAIN. A first lookup of `probe.invalid` checks that the listener
sees what the resolver sends. Writes {"probe": [...], "commands": [{argv, code, queries}]}.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading


def _qname(packet: bytes) -> str:
    labels, i = [], 12
    while i < len(packet) and packet[i]:
        labels.append(packet[i + 1:i + 1 + packet[i]].decode("ascii", "replace"))
        i += 1 + packet[i]
    return ".".join(labels)


def _listen(sock: socket.socket, log: list[str]) -> None:
    while True:
        packet, peer = sock.recvfrom(4096)
        log.append(_qname(packet))
        if len(packet) >= 12:  # NXDOMAIN: answer bit, recursion available, rcode 3
            sock.sendto(packet[:2] + bytes([0x81, 0x83]) + packet[4:], peer)


def _isolate_resolver() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("nameserver 127.0.0.1\noptions attempts:1 timeout:1\n")
    conf.close()
    subprocess.run(["mount", "--bind", conf.name, "/etc/resolv.conf"], check=True)


def main() -> None:
    out, commands = sys.argv[1], [c.split("\x1f") for c in sys.argv[2:]]
    _isolate_resolver()
    log: list[str] = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))  # bound before the probe: a busy machine starts threads late
    threading.Thread(target=_listen, args=(sock, log), daemon=True).start()
    try:
        socket.getaddrinfo("probe.invalid", 443)
    except OSError:
        pass
    report = {"probe": list(log), "commands": []}
    for argv in commands:
        start = len(log)
        done = subprocess.run([sys.executable, "-m", "edgeopt.cli", *argv],
                              capture_output=True, text=True, timeout=900)
        report["commands"].append({"argv": argv, "code": done.returncode,
                                   "stderr": done.stderr[-2000:], "queries": log[start:]})
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
