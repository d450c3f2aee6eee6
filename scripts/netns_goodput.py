#!/usr/bin/env python3
"""One TCP flow's goodput between two hosts of a netns cluster (scripts/netns_cluster.sh measure).

  netns_goodput.py receive ADDRESS PORT_FILE TIMEOUT_S   listens on ADDRESS (port 0), writes the
      port to PORT_FILE, receives one connection until the sender closes it and prints the
      goodput in bits/s, not counting the first 0.5 s (slow start).
  netns_goodput.py send ADDRESS PORT SECONDS   sends zeros to ADDRESS:PORT for SECONDS.
"""
import os
import socket
import sys
import time

WARMUP_S = 0.5
BLOCK = 1 << 20


def receive(address, port_file, timeout_s):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((address, 0))
        listener.listen(1)
        listener.settimeout(timeout_s)
        with open(port_file + ".tmp", "w") as f:
            f.write(f"{listener.getsockname()[1]}\n")
        os.rename(port_file + ".tmp", port_file)
        conn, _ = listener.accept()
    with conn:
        conn.settimeout(timeout_s)
        view = memoryview(bytearray(BLOCK))
        total = 0
        first = last = warm_at = None
        warm_bytes = 0
        while True:
            n = conn.recv_into(view)
            if n == 0:
                break
            now = time.monotonic()
            if first is None:
                first = now
            total += n
            last = now
            if warm_at is None and now - first >= WARMUP_S:
                warm_at, warm_bytes = now, total
    if warm_at is None or last <= warm_at:
        sys.exit("netns_goodput: the flow ended before the warm-up was over")
    print(f"{(total - warm_bytes) * 8 / (last - warm_at):.0f}")


def send(address, port, seconds):
    block = bytes(BLOCK)
    with socket.create_connection((address, port), timeout=10) as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(block)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "receive":
        receive(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
