#!/usr/bin/env python3
"""Sets how a topology's point-to-point transfers between nodes are priced (communication.p2p_network).

  tools/calibration/fit_p2p_network.py --machine h100_dgx --topology topologies/dgx-h100-4node.json [--write | --check]
  tools/calibration/fit_p2p_network.py --machine h100_dgx --topology topologies/dgx-b200.json --assumed-for "DGX B200"

The multi-node files made by tools/make_rail_topology.py (dgx-h100-128node, -768node, dgx-b200-4node)
take the value from the file they are made from.

NCCL's point-to-point transfers (send/recv, and the pairs of an all-to-all) reach less of a NIC than
its ring collectives: microsoft/vidur's DGX H100 send/recv between GPUs of two nodes
(tools/calibration/raw/vidur/network/h100_dgx_send_recv.csv, num_workers 2, devices_per_node 1)
streams about 34 GB/s at 1-64 MiB, where a ring all-reduce over the same 400 Gb/s NICs moves 46-47
GB/s per NIC (370 GB/s bus bandwidth on 4 x 8 H100, measurements.md). The transfer time is taken as
latency + bytes / bandwidth, fitted by least squares on the time of every point of at least 1 MiB
(below, vidur's floor of 10-20 us per call dominates: its kernel durations wait for the peer's
launch, which the simulated latency does not carry); the efficiency is that bandwidth over the capacity of the topology's NIC link (line
rate x link efficiency), the route's narrowest. The added latency is NCCL's: a P2P transfer runs the
Simple protocol, whose network hop costs 14 us where the route's links carry the LL hop's 2.7 us
(src/graph/tuning.cc); the same curve's smallest sizes agree (2-34 KiB: 18.4 us between nodes, 6.6 us
inside one, on the same timer). Deterministic.
"""
import argparse
import csv
import json
import os
import sys

from topology_text import with_communication_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAW = os.path.join(ROOT, "tools", "calibration", "raw", "vidur", "network")
MIN_BYTES = 1 << 20
SMALL_BYTES = 34816


def send_recv(machine):
    """(devices per node, bytes, seconds) of every row of the machine's two-GPU send/recv curve."""
    with open(os.path.join(RAW, f"{machine}_send_recv.csv")) as f:
        return [(int(r["devices_per_node"]), int(r["size_bytes"]), float(r["median_ms"]) * 1e-3)
                for r in csv.DictReader(f) if int(r["num_workers"]) == 2]


def small_mean_us(rows, devices_per_node):
    times = [t * 1e6 for d, s, t in rows if d == devices_per_node and s <= SMALL_BYTES]
    return sum(times) / len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machine", required=True, help="h100_dgx")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--write", action="store_true", help="write communication.p2p_network into the file")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file does not hold what --write would write")
    ap.add_argument("--assumed-for", help="another machine with the same NICs: the value is marked an estimate for it")
    args = ap.parse_args()
    path = os.path.join(ROOT, args.topology)
    text = open(path).read()
    topology = json.loads(text)
    nic = topology["node"]["nics"]["nic_link"]
    capacity = nic["line_rate_bytes_per_s"]["value"] * nic["efficiency"]["value"]
    rows = send_recv(args.machine)
    points = [(s, t) for d, s, t in rows if d == 1 and s >= MIN_BYTES]
    n = len(points)
    sx = sum(s for s, _ in points)
    sy = sum(t for _, t in points)
    sxx = sum(s * s for s, _ in points)
    sxy = sum(s * t for s, t in points)
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    intercept = (sy - slope * sx) / n
    bandwidth = 1.0 / slope
    efficiency = float(f"{bandwidth / capacity:.4g}")
    assumed = "" if args.assumed_for is None else f"estimate: assumed for {args.assumed_for} (the same NICs), "
    value = {
        "efficiency": {
            "value": efficiency,
            "source": (assumed + f"fitted by tools/calibration/fit_p2p_network.py to microsoft/vidur {args.machine} "
                       f"send_recv between two nodes, {n} points of 1-64 MiB (MIT; tools/calibration/raw/vidur/network): "
                       f"time = {intercept * 1e6:.1f} us + bytes / {bandwidth / 1e9:.2f} GB/s by least squares, over "
                       f"the NIC link's {capacity / 1e9:.2f} GB/s; measured on DGX H100 with 400 Gb/s ConnectX-7 NICs"),
        },
        "added_latency_s": {
            "value": 1.13e-05,
            "source": (assumed + "14 - 2.7 us: NCCL src/graph/tuning.cc per-network-hop latency Simple 14 us (P2P runs "
                       "Simple above 16 KiB per channel, src/enqueue.cc) less LL's 2.7 us that the route's links "
                       "carry; microsoft/vidur "
                       f"{args.machine} send_recv of 2-34 KiB agrees: {small_mean_us(rows, 1):.1f} us between "
                       f"two nodes, {small_mean_us(rows, 2):.1f} us inside one"),
        },
    }
    print(json.dumps(value, indent=2))
    print(f"{n} points, bandwidth {bandwidth / 1e9:.2f} GB/s, latency {intercept * 1e6:.1f} us", file=sys.stderr)
    updated = with_communication_key(text, "p2p_network", value)
    if args.check and updated != text:
        print(f"{args.topology}: communication.p2p_network differs from what the fit writes", file=sys.stderr)
        return 1
    if args.write:
        with open(path, "w") as f:
            f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
