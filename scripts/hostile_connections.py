#!/usr/bin/env python3
"""Hostile connections against a local cluster, and what they leave behind.

Opens --count connections (per round) to each of node-0's data port, peer (gRPC, mutual TLS) port and
session socket, in batches: each sends nothing, random bytes, or (data port) a well-formed hello
that claims node-1's address, then closes. Afterwards it waits past the handshake timeouts and
compares node-0's open descriptors, threads and resident memory with before, and runs a checked
all-reduce over the cluster (baton bench) to show that it still serves. Talks to loopback only.

  python3 scripts/hostile_connections.py [--build build] [--count 10000] [--rounds 4]
      [--data-encryption]
"""
import argparse
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time


def proc_state(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss_kib = threads = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return fds, threads, rss_kib


def hello(address):
    # transport/tcp/frame.h: magic "BTNF", version 2, type 2 (hello), flags 0 or 2 (asks for a sealed
    # connection), zero tag, length.
    payload = os.urandom(16) + address.encode()
    flags = random.choice((0, 2))
    return struct.pack("<4sBBH QQII Q", b"BTNF", 2, 2, flags, 0, 0, 0, 0, len(payload)) + payload


def split(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


def attack(target, count, batch, make, send):
    opened = refused = 0
    for start in range(0, count, batch):
        socks = []
        for i in range(start, min(count, start + batch)):
            try:
                s = make()
                s.setblocking(False)
                choice = i % 3
                if choice == 1:
                    s.send(os.urandom(random.randint(1, 200)))
                elif choice == 2:
                    s.send(send())
                socks.append(s)
                opened += 1
            except OSError:
                refused += 1
        for s in socks:
            s.close()
    print(f"  {target}: {opened} connections opened and closed, {refused} refused at once")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--targets", default="data,peer,session",
                        help="which of data, peer, session to attack")
    parser.add_argument("--data-encryption", action="store_true",
                        help="run the daemons with data_encryption (sealed data connections)")
    args = parser.parse_args()
    baton = os.path.join(args.build, "bin", "baton")
    directory = tempfile.mkdtemp(prefix="baton-hostile-")
    up = [baton, "local", "up", f"--dir={directory}", "--nodes=2"]
    if args.data_encryption:
        up.append("--daemon-args=--data-encryption=true")
    subprocess.run(up, check=True, stdout=subprocess.DEVNULL)
    try:
        daemons = []
        with open(os.path.join(directory, "cluster.txt")) as cluster:
            for line in cluster:
                if line.startswith("node="):
                    daemons.append(dict(field.split("=", 1) for field in line.split()))
        victim, other = daemons[0], daemons[1]
        pid = int(victim["pid"])
        subprocess.run([baton, "bench", f"--cluster={directory}", "-b", "1M", "-e", "1M", "-n",
                        "5", "-w", "1"], check=True, stdout=subprocess.DEVNULL)
        time.sleep(1)
        before = proc_state(pid)
        print(f"node-0 before: {before[0]} fds, {before[1]} threads, {before[2]} KiB resident")
        # Rounds: memory that the allocator keeps after the first comes back in the next; memory
        # that leaks grows with every round.
        rss = []
        for round_ in range(args.rounds):
            start = time.time()
            targets = args.targets.split(",")
            if "data" in targets:
                attack("data port", args.count, args.batch,
                       lambda: socket.create_connection(split(victim["data"]), timeout=5),
                       lambda: hello(other["data"]))
            if "peer" in targets:
                attack("peer port", args.count, args.batch,
                       lambda: socket.create_connection(split(victim["peer"]), timeout=5),
                       lambda: b"\x16\x03\x01\x00\x05hello")
            if "session" in targets:
                attack("session socket", args.count, args.batch,
                       lambda: _unix(victim["socket"] + ".session"),
                       lambda: os.urandom(64))
            print(f"  round {round_ + 1}: {3 * args.count} connections in "
                  f"{time.time() - start:.1f} s")
            # Past data_handshake_timeout and session_handshake_timeout (5 s), and batond's
            # return of freed memory to the system (every 10 s).
            time.sleep(12)
            after = proc_state(pid)
            rss.append(after[2])
            print(f"node-0 after round {round_ + 1}: {after[0]} fds, {after[1]} threads, "
                  f"{after[2]} KiB resident")
        bench = subprocess.run([baton, "bench", f"--cluster={directory}", "-b", "8", "-e", "4M",
                                "-n", "5", "-w", "1"], capture_output=True, text=True)
        # Columns: size count type redop time algbw busbw #wrong algo.
        wrong = [line for line in bench.stdout.splitlines() if line.strip() and
                 line.split()[0].isdigit() and line.split()[7] != "0"]
        print(f"baton bench after: exit {bench.returncode}, {len(wrong)} sizes with wrong elements")
        alive = os.path.exists(f"/proc/{pid}")
        # The first round grows the allocator's working set (measured: 28 MB at rest, 40-47 MB
        # after one round, 45-50 MB after each of seven, going up and down by a few MB); growth
        # of more than 25 % after the second round counts as a leak.
        grew = len(rss) > 2 and rss[-1] - rss[1] > 0.25 * rss[1]
        if grew:
            print(f"resident memory grew by {rss[-1] - rss[1]} KiB after the second round")
        ok = (alive and bench.returncode == 0 and not wrong and after[0] <= before[0] and
              after[1] <= before[1] and not grew)
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        subprocess.run([baton, "local", "down", f"--dir={directory}"], stdout=subprocess.DEVNULL)


def _unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(path)
    return s


if __name__ == "__main__":
    sys.exit(main())
