#!/usr/bin/env python3
"""Fits how much longer than NCCL's model its chosen collectives take across nodes.

  tools/calibration/fit_network_correction.py --topology topologies/dgx-h100-4node.json [--write | --check]
  tools/calibration/fit_network_correction.py --topology my-cluster.json --samples nccl.json --write

NCCL prices an all-reduce, all-gather or reduce-scatter across nodes per algorithm and protocol with
one latency and one bandwidth (src/graph/tuning.cc) and runs the least; fusesim does the same where a
topology gives `communication.network_tuning.collective_model` (src/sim/nccl_collective.cpp, mirrored
below). On measured nccl-tests curves across nodes the chosen algorithm takes longer than the model
says in two places: a few microseconds more per network hop at small sizes, and a bandwidth 20-40%
short of the model's from about 1 MiB to 256 MiB that recovers by 1 GiB (NCCL's own
treeCorrectionFactor says the same of trees alone: "trees are not perfectly sticking to the model for
medium sizes"). On A100 curves a tree's small all-reduce takes 11-18 us more than the model from 2 to
16 nodes, a gap that hardly grows with the nodes (a hop's latency would). `collective_model.
measured_correction` charges these after NCCL's model has chosen:

    latency + network hops x extra_network_hop_latency_s (+ extra_tree_latency_s, a tree's)
      + bytes / bandwidth x (1 + peak x exp(-(log2 bytes - center)^2 / (2 width^2)))   (Simple, LL128)
      + bytes / bandwidth                                                             (LL)

LL's bandwidth in NCCL's model is the hosts' cap (llMaxBw), not the network's, so the network's
mid-size shortfall is not charged to it (the fitted curves agree: rms log error 0.0621 with the
slowdown on every protocol, 0.0589 without it on LL).

The numbers are fitted here (Nelder-Mead on the squared log error of the time) on the cases of
validation/published.json marked fitted across nodes on topologies of the file's collective model (the
same NCCL constants and channels), as many as the cases tell apart: the hop's always, the tree's where
trees were measured at two node counts or more, the slowdown where sizes above 1 MiB were (with Simple or
LL128). The Hopper files (one model) fit on the two two-node all-reduce curves of NVIDIA/nccl-tests#309,
its four-node curve up to 8 MiB (where NCCL's model runs trees) and the 2-8 GiB plateau of its eight-node
curve: the hop, the tree's (trees at two and four nodes) and the slowdown. The other Hopper curves across
nodes (the rest of the four- and eight-node curves, #294, the 4-node all-reduce and all-gather of
ZiyanIshani/vpbenchmarking) stay held out; their hosts are H100 nodes of 8 x 400 Gb/s. The A100 files fit
on ABCI's all-reduce curves of 2, 4, 8 and 16 nodes at 1-64 KiB (aistabci/abci2.0benchmark, NCCL 2.8.4):
the hop and the tree; the A100 curves of OCI's RoCE hosts, CoreWeave's 16 nodes and Azure NDmv4 stay held
out. --write sets collective_model.measured_correction (the rest of the file byte for byte; added before
bandwidth_factors where absent); --check exits 1 where the file holds something else. Deterministic.

For another cluster: run nccl-tests (all_reduce_perf, all_gather_perf, reduce_scatter_perf) across
two or more of its nodes, turn the logs into samples with `fusesim calibrate import-nccl-tests LOGS
--topology my-cluster.json -o nccl.json`, and fit on them with `--samples nccl.json --write`.
"""
import argparse
import json
import math
import os
import sys

from fit_collectives import nelder_mead

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "validation", "published.json")
PROTOCOLS = ("simple", "ll", "ll128")
KEY = "measured_correction"


def log2_floor(x):
    return x.bit_length() - 1 if x > 0 else -1


def ring_network_steps(op, nodes):
    """The steps of a ring that cross the network: 2 (nodes - 1) of an all-reduce's, nodes - 1 of the others'."""
    return (2 if op == "all_reduce" else 1) * (nodes - 1)


def ll128_between_nodes(model, algorithm):
    """Whether the model may run LL128 between nodes by `algorithm` (ll128_between_nodes: rings and trees,
    default true; or ll128_between_nodes_algorithms: those it names)."""
    if "ll128_between_nodes_algorithms" in model:
        return algorithm in model["ll128_between_nodes_algorithms"]
    return algorithm in ("ring", "tree") and model.get("ll128_between_nodes", True)


def model_time(tuning, op, algorithm, protocol, ranks, nodes, size):
    """(latency s, algorithm bytes/s) as src/sim/nccl_collective.cpp's nccl_collective_time, or None."""
    m = tuning["collective_model"]
    all_reduce = op == "all_reduce"
    if protocol == "ll128" and not ll128_between_nodes(m, algorithm):
        return None
    if not all_reduce and algorithm != "ring":
        return None
    p = PROTOCOLS.index(protocol)
    per_node = ranks // nodes
    channels = min(m["channels"], per_node)
    count = "two_nodes" if nodes <= 2 else "more_nodes"
    caps = m["channel_caps_bytes_per_s"][count]
    steps = 2 * (ranks - 1) if all_reduce else ranks - 1
    ll_cap = tuning["ll_max_bus_bandwidth_bytes_per_s"][count]["value"]
    intra_bw = m["channel_bandwidth_bytes_per_s"]
    inter_bw = m.get("channel_bandwidth_inter_bytes_per_s", {"value": intra_bw})["value"]
    channel_bw = intra_bw if nodes <= 2 else inter_bw
    f = m["bandwidth_factors"]
    if algorithm == "nvls_tree":
        nvls = m.get("nvls_tree")
        if protocol != "simple" or nvls is None or channels < 2:
            return None
        intra = intra_bw * nvls["efficiency"] * (channels - 1) / channels * 2.0
        inter = inter_bw * (2.0 if nodes <= 2 else 1.0)
        channel_bw = min(intra, inter, caps["nvls_tree"])
    bus = channels * channel_bw
    if algorithm == "ring" and protocol == "ll":
        bus = min(ll_cap, bus * f["ring_ll"])
    if algorithm == "ring" and protocol == "ll128":
        bus = min(bus * f["ring_ll128"], channels * caps["ring_ll128"])
    if algorithm == "tree":
        bus = min(bus * f["tree"], channels * caps["tree"])
        if protocol == "ll":
            bus = min(bus * f["tree_ll"], ll_cap)
        if protocol == "ll128":
            bus = min(bus * f["tree_ll128"], channels * caps["tree_ll128"])
    algorithm_bw = bus * 0.5 if algorithm == "tree" else bus * ranks / steps
    log_nodes = log2_floor(nodes)
    if algorithm == "ring":
        overhead = m["network_overhead_s"] * (3.0 if protocol == "simple" else 1.0)
        intra = max(m["ring"]["node_hop_latency_s"][protocol], overhead)
        hop = tuning["ring_hop_latency_s"][protocol]["value"]
        network_steps = ring_network_steps(op, nodes)
        latency = m["ring"]["base_latency_s"][protocol] + (steps - network_steps) * intra + network_steps * hop
        if all_reduce and protocol == "simple" and size / (2.0 * channels * ranks) >= 64.0:
            latency *= m["ring_simple_plateau"]
    elif algorithm == "tree":
        hop = tuning["tree_hop_latency_s"][protocol]["value"]
        latency = m["tree"]["base_latency_s"][protocol] + 2.0 * ((per_node - 1) * m["tree"]["node_hop_latency_s"][
            protocol] + log_nodes * hop)
        factors = tuning.get("tree_size_factors", {}).get(protocol, [])
        i = log2_floor(size >> 6)
        if 0 <= i < len(factors):
            algorithm_bw *= factors[i]
    else:
        latency = m["nvls_tree"]["node_latency_s"] + 2.0 * log_nodes * m["nvls_tree"]["network_hop_latency_s"]
    return latency, algorithm_bw


def bus_share(op, ranks):
    """nccl-tests' busbw / algbw: the share of the buffer each rank moves."""
    return 2 * (ranks - 1) / ranks if op == "all_reduce" else (ranks - 1) / ranks


def chosen(tuning, op, ranks, nodes, size):
    """NCCL's choice, (algorithm, protocol, (latency s, algorithm bytes/s)): the least time of its model,
    the earlier on a tie (ring, tree, NVLS tree; Simple first)."""
    best = None
    for a in ("ring", "tree", "nvls_tree"):
        for p in PROTOCOLS:
            t = model_time(tuning, op, a, p, ranks, nodes, size)
            if t and (best is None or t[0] + size / t[1] < best[2][0] + size / best[2][1]):
                best = (a, p, t)
    return best


# The correction's numbers, in the order measured_time takes them, and their keys in the topology file.
KEYS = ("extra_network_hop_latency_s", "mid_size_slowdown_peak", "mid_size_center_log2_bytes", "mid_size_width_log2",
        "extra_tree_latency_s")
NONE = (0.0, 0.0, 0.0, 1.0, 0.0)


def measured_time(op, algorithm, protocol, nodes, size, latency, bandwidth, params):
    extra_hop_s, peak, center, width, tree_s = params
    hops = ring_network_steps(op, nodes) if algorithm == "ring" else 2 * log2_floor(nodes)
    # The network's mid-size shortfall slows Simple and LL128, not LL (its bandwidth is the hosts' cap).
    slowdown = 1.0 if protocol == "ll" else 1.0 + peak * math.exp(-0.5 * ((math.log2(size) - center) / width) ** 2)
    return latency + hops * extra_hop_s + (tree_s if algorithm == "tree" else 0.0) + size / bandwidth * slowdown


def file_params(tuning):
    """The file's correction as measured_time takes it (NONE's where a key is absent)."""
    c = tuning["collective_model"].get(KEY, {})
    return tuple(c.get(k, d) for k, d in zip(KEYS, NONE))


def same_model(a, b):
    """Whether two collective models are one (NCCL's constants of one GPU generation, the channels of one
    host): equal but for their sources and measured corrections."""
    def strip(m):
        return {k: v for k, v in m.items() if k not in ("source", KEY)}
    return strip(a) == strip(b)


def fitted_cases(tuning):
    """The cases marked fitted across nodes on topologies with this collective model (the Hopper files'
    on Hopper curves, the A100 files' on A100 curves)."""
    out = []
    models = {}
    for c in json.load(open(CASES))["cases"]:
        if c["category"] != "collective" or not c.get("note", "").startswith("fitted") or c.get("ranks", 0) // 8 < 2:
            continue
        if c["topology"] not in models:
            doc = json.load(open(os.path.join(ROOT, "topologies", c["topology"] + ".json")))
            models[c["topology"]] = doc["communication"]["network_tuning"]["collective_model"]
        if same_model(models[c["topology"]], tuning["collective_model"]):
            out.append(c)
    return out


def fitted_points(tuning, cases):
    """(op, ranks, nodes, bytes, measured seconds, algorithm, latency, bandwidth, protocol) of cases
    (fitted_cases')."""
    out = []
    for c in cases:
        ranks = c["ranks"]
        nodes = ranks // 8
        seconds = c["bytes"] * bus_share(c["op"], ranks) / (c["measured_busbw_GBps"] * 1e9)
        a, p, (lat, bw) = chosen(tuning, c["op"], ranks, nodes, c["bytes"])
        out.append((c["op"], ranks, nodes, c["bytes"], seconds, a, lat, bw, p))
    return out


# What the fitted cases of each GPU generation are, and what stays held out, for the file's source.
CURVES = {
    "h100": "NVIDIA/nccl-tests#309: two-node all-reduce curves, 8 x H100 and 8 x 400 Gb/s each, NCCL 2.26, its "
            "four-node curve up to 8 MiB and the 2-8 GiB plateau of its eight-node curve); held out on the rest of its "
            "four- and eight-node curves, #294 and the 4-node all-reduce and all-gather of ZiyanIshani/vpbenchmarking",
    "a100": "aistabci/abci2.0benchmark: all-reduce curves of 2, 4, 8 and 16 ABCI nodes of 8 x A100, NCCL 2.8.4, "
            "at 1-64 KiB, where NCCL's model runs trees with LL); held out on the A100 curves of 2 OCI hosts "
            "(oracle-quickstart/oci-hpc-oke), of 16 CoreWeave nodes at 1-8 KiB (coreweave/nccl-tests) and of Azure "
            "NDmv4 (microsoft/mscclpp)",
}


def sample_points(tuning, paths):
    """The same tuple as fitted_points, of the collective samples across nodes of calibration documents
    (`fusesim calibrate import-nccl-tests` output: each size's least time, as the cases take the faster
    of nccl-tests' two columns), the collectives the topology's model prices."""
    out = []
    for path in paths:
        for c in json.load(open(path)).get("collectives", []):
            ranks, nodes = c["ranks"], c["nodes"]
            if (nodes < 2 or ranks % nodes or ranks // nodes < 2 or c["bytes"] <= 0
                    or c["op"] not in tuning["collective_model"]["collectives"]):
                continue
            a, p, (lat, bw) = chosen(tuning, c["op"], ranks, nodes, c["bytes"])
            out.append((c["op"], ranks, nodes, c["bytes"], min(c["time_s"]), a, lat, bw, p))
    return out


def fit(pts):
    """Fits what the points can tell apart: the extra latency a network hop always; a tree's own extra
    latency where trees were measured at two or more node counts (at one, it and the hops' are one
    number); the mid-size slowdown where sizes above 1 MiB were with Simple or LL128 (below, bandwidth
    hardly counts; LL is not slowed).
    Returns (how many points, {key: value} of the fitted numbers, rms log error)."""
    tree_nodes = {nodes for _, _, nodes, _, _, a, _, _, _ in pts if a == "tree"}
    fit_tree = len(tree_nodes) >= 2
    fit_slowdown = any(b > 1 << 20 and p != "ll" for _, _, _, b, _, _, _, _, p in pts)
    if not pts:
        sys.exit("no measured size across nodes to fit on (no case marked fitted across nodes on a topology of "
                 "this collective model, or no sample across nodes)")
    numbers = 1 + (3 if fit_slowdown else 0) + (1 if fit_tree else 0)
    if len(pts) < 2 * numbers:
        sys.exit(f"{len(pts)} measured sizes across nodes: at least {2 * numbers} are needed to fit {numbers} numbers")

    # Only the numbers fitted are Nelder-Mead's coordinates (in KEYS' order, the tree's last).
    x0, steps = [1.5], [0.5]
    if fit_slowdown:
        x0, steps = x0 + [0.8, 23.0, 2.5], steps + [0.2, 1.0, 0.5]
    if fit_tree:
        x0, steps = x0 + [5.0], steps + [2.0]

    def unpack(x):
        extra_hop_s, tree_s = abs(x[0]) * 1e-6, abs(x[-1]) * 1e-6 if fit_tree else 0.0
        if fit_slowdown:
            return extra_hop_s, abs(x[1]), x[2], max(abs(x[3]), 0.25), tree_s
        return extra_hop_s, 0.0, 0.0, 1.0, tree_s

    def loss(x):
        p = unpack(x)
        return sum(math.log(measured_time(op, a, protocol, nodes, b, lat, bw, p) / t) ** 2
                   for op, _, nodes, b, t, a, lat, bw, protocol in pts) / len(pts)

    x = nelder_mead(loss, x0, steps, 4000)
    p = unpack(x)
    value = {"extra_network_hop_latency_s": float(f"{p[0]:.3g}")}
    if fit_tree:
        value["extra_tree_latency_s"] = float(f"{p[4]:.3g}")
    if fit_slowdown:
        value.update({"mid_size_slowdown_peak": round(p[1], 3), "mid_size_center_log2_bytes": round(p[2], 2),
                      "mid_size_width_log2": round(p[3], 2)})
    return len(pts), value, math.sqrt(loss(x))


def with_correction(text, value):
    """The topology's text with collective_model.measured_correction set to value, the rest byte for
    byte: replaced where it is, else added before the model's bandwidth_factors."""
    decoder = json.JSONDecoder()
    model = text.index('"collective_model"')
    at = text.find(json.dumps(KEY), model)
    if at >= 0:
        start = text.index("{", at)
        _, end = decoder.raw_decode(text, start)
    else:
        at = text.index('"bandwidth_factors"', model)
        start = end = at
    indent = text[text.rfind("\n", 0, at) + 1:at]
    block = json.dumps(value, indent=2).replace("\n", "\n" + indent)
    if start == end:  # a new key
        return text[:at] + json.dumps(KEY) + ": " + block + ",\n" + indent + text[at:]
    return text[:start] + block + text[end:]


def compare_validate(tuning, validate_output, topology):
    """Each case across nodes simulated on `topology`: validate's predicted bus bandwidth (its profile
    column) against this mirror's at the file's correction, within the printed digits and 0.5% (the
    engine's NVLink drains before the first and after the last NIC chunk)."""
    params = file_params(tuning)
    printed = {}
    for line in open(validate_output):
        f = line.split()
        if line.startswith("collective/") and len(f) > 7 and f[2] == "GB/s":
            printed[f[0]] = f[6]
    compared = 0
    for case in json.load(open(CASES))["cases"]:
        ranks = case.get("ranks", 0)
        if (case["category"] != "collective" or case["topology"] != topology or ranks // 8 < 2
                or case["op"] not in tuning["collective_model"]["collectives"] or case["id"] not in printed):
            continue  # not priced by the model (an all-to-all; one node)
        nodes = ranks // 8
        a, p, (lat, bw) = chosen(tuning, case["op"], ranks, nodes, case["bytes"])
        seconds = measured_time(case["op"], a, p, nodes, case["bytes"], lat, bw, params)
        mine = case["bytes"] * bus_share(case["op"], ranks) / seconds / 1e9
        text = printed[case["id"]]
        digits = len(text.split(".")[1]) if "." in text else 0
        if abs(mine - float(text)) > 0.5 * 10 ** -digits + 0.005 * float(text):
            sys.exit(f"{case['id']}: validate predicts {text} GB/s, the mirror {mine:.4g}")
        compared += 1
    if compared == 0:
        sys.exit(f"{validate_output}: no case across nodes on {topology} to compare")
    print(f"{compared} cases across nodes on {topology}: validate and the mirror agree", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", required=True)
    ap.add_argument("--write", action="store_true", help="write collective_model.measured_correction into the file")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file does not hold what --write would write")
    ap.add_argument("--samples", metavar="DOC", nargs="+",
                    help="fit on the collective samples across nodes of these calibration documents (written by "
                         "`fusesim calibrate import-nccl-tests` from nccl-tests logs of your cluster) instead of "
                         "the validation cases marked fitted")
    ap.add_argument("--compare-validate", metavar="FILE",
                    help="`fusesim validate --category collective` output: exit 1 where its prediction of a case "
                         "across nodes on this topology is not this script's (mirror and engine apart)")
    args = ap.parse_args()
    path = os.path.join(ROOT, args.topology) if not os.path.isabs(args.topology) else args.topology
    text = open(path).read()
    tuning = json.loads(text)["communication"]["network_tuning"]
    cases = None if args.samples else fitted_cases(tuning)
    n, value, rms = fit(sample_points(tuning, args.samples) if args.samples else fitted_points(tuning, cases))
    if args.samples:
        value["source"] = (
            f"fitted by tools/calibration/fit_network_correction.py on {n} sizes across nodes of nccl-tests samples "
            f"({', '.join(os.path.basename(p) for p in args.samples)}, written by fusesim calibrate import-nccl-tests)")
    else:
        generation = cases[0]["id"].split("/")[1].split("-")[0]
        curves = CURVES.get(generation, "their sources)")
        value["source"] = (
            f"fitted by tools/calibration/fit_network_correction.py on the {n} cases of validation/published.json "
            f"marked fitted across nodes on topologies with this collective model ({curves} "
            "(docs/calibration.md, \"Collectives\")")
    print(json.dumps(value, indent=2))
    print(f"rms log error over {n} sizes: {rms:.4f}", file=sys.stderr)
    if args.compare_validate:
        compare_validate(tuning, args.compare_validate, os.path.splitext(os.path.basename(path))[0])
    old = tuning["collective_model"].get(KEY)
    if args.check:
        if old != value:
            print(f"{args.topology}: collective_model.{KEY} is not what the fit gives", file=sys.stderr)
            sys.exit(1)
    if args.write:
        open(path, "w").write(with_correction(text, value))


if __name__ == "__main__":
    main()
