"""python -m baton status [--socket PATH] [--json]: one daemon's state, as `baton status` shows it.

The status comes from libbaton (baton_daemon_status_json: the daemon's GetStatus, as the JSON
document `baton status --json` prints); --json prints that document, and without it the same
table as the CLI is formatted here from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from . import BatonError, _C


def _human_bytes(count: float) -> str:
    """1536 -> "1.5 KiB", as the CLI writes sizes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while count >= 1024 and unit < 4:
        count /= 1024
        unit += 1
    return "%.0f B" % count if unit == 0 else "%.1f %s" % (count, units[unit])


def _peer_label(link: Dict[str, Any]) -> str:
    if link.get("peer_node"):
        return link["peer_node"]
    return link.get("peer_address") or link.get("peer", "")


def format_status(status: Dict[str, Any]) -> str:
    """The text `baton status` prints for a status document (daemon_status_json, parsed)."""
    lines: List[str] = []
    lines.append("node %s (batond %s, pid %d, up %.0f s)" % (
        status["node_name"], status["version"], int(status["pid"]),
        int(status["uptime_ms"]) / 1000.0))
    lines.append("  peer %s  data %s  metrics %s  sessions %d" % (
        status["peer_address"], status["data_address"], status["metrics_address"],
        int(status["sessions"])))
    communicators = status.get("communicators", [])
    lines.append("communicators: %d" % len(communicators))
    for c in communicators:
        lines.append("  %016x  world %d  daemons %d  local ranks %d  ops %d  %s" % (
            int(c["comm_tag"]), int(c["world_size"]), int(c["daemon_count"]),
            len(c.get("local_ranks", [])), int(c["ops_completed"]), c["state"]))
    links = status.get("links", [])
    up = sum(1 for link in links if link.get("peer_up"))
    lines.append("peers: %d (%d up, %d down or not yet probed)" % (len(links), up, len(links) - up))
    for link in links:
        flagged = link.get("flagged_bandwidth") or link.get("flagged_rtt")
        lines.append("  %-16s %-22s %-5s tx %s  rx %s  errors %d%s" % (
            _peer_label(link), link.get("peer_address", ""),
            "up" if link.get("peer_up") else "down",
            _human_bytes(float(link.get("tx_bytes", 0))),
            _human_bytes(float(link.get("rx_bytes", 0))), int(link.get("errors", 0)),
            "  FLAGGED (see baton links)" if flagged else ""))
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m baton", description="Baton from Python: look at a daemon.")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.required = True
    status = commands.add_parser(
        "status", help="show one daemon's state: peers, links, communicators",
        description="Shows one daemon: its addresses, sessions, communicators, and its peers "
        "(up or down), as `baton status` does.")
    status.add_argument("--socket", default=None,
                        help="daemon socket (default: $BATON_SOCKET or /run/baton/batond.sock)")
    status.add_argument("--json", action="store_true", help="print the daemon's status as JSON")
    status.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the daemon (default 5)")
    args = parser.parse_args(argv)

    try:
        text = _C.daemon_status_json(args.socket, args.timeout)
    except BatonError as e:
        print(f"baton status: {e.message}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(text)
    else:
        sys.stdout.write(format_status(json.loads(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
