#!/usr/bin/env python3
"""Fits the LL and LL128 protocols of a topology's ring collectives to a measured all-reduce curve.

  tools/calibration/fit_collectives.py --machine h100_dgx --topology topologies/dgx-h100.json \
      --ll-from-nccl hopper [--assumed-for "HGX H200"] [--write | --check]

NCCL prices a collective per algorithm and protocol with one latency and one bandwidth
(src/graph/tuning.cc) and runs the cheapest for the size. fusesim's simulated ring does the same
(docs/engine.md, "Protocols"): a protocol p costs

    base_p + steps x (route latency + step_p) + steps x bytes / ranks / (link bandwidth x efficiency_p)

Simple keeps the topology's own constants (set from nccl-tests' large-message bandwidth and NCCL's
latencies). With --ll-from-nccl, LL takes NCCL's own constants (base 6.6 us, its NVLink hop in the
route, NCCL's llMaxBw of the GPU generation as its bandwidth) and LL128 (base, step, efficiency) is
fitted beside it; without, both are fitted. The fit is Nelder-Mead on the squared log error of the
fastest protocol's time over the single-node all-reduce curves of
tools/calibration/raw/vidur/network/<machine>_all_reduce.csv (2, 4 and 8 GPUs). vidur's timings
below a few MiB sit on a per-call floor of 30-45 us (NCCL kernel durations of calls launched one by
one under the profiler: each kernel waits for the slowest host's launch), which is why LL is not
fitted (docs/calibration.md, "Collectives"). --write sets communication.protocols in the file, the rest of
it byte for byte; --check exits 1 where the file holds something else. Deterministic.
"""
import argparse
import csv
import json
import math
import os
import sys

from topology_text import with_communication_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAW = os.path.join(ROOT, "tools", "calibration", "raw", "vidur", "network")


LL_SHARE = 0.5
LL128_SHARE = 120 / 128


def nelder_mead(f, x0, steps, iterations):
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (steps[i] if j == i else 0) for j in range(n)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-13:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        along = lambda t: [c[j] + t * (pts[-1][j] - c[j]) for j in range(n)]
        xr = along(-1.0); fr = f(xr)
        if fr < vals[0]:
            xe = along(-2.0); fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = along(0.5); fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(n)]
                    vals[i] = f(pts[i])
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i]


def curve(machine, ranks):
    by_size = {}
    with open(os.path.join(RAW, f"{machine}_all_reduce.csv")) as f:
        for r in csv.DictReader(f):
            if int(r["num_workers"]) == ranks and int(r["devices_per_node"]) == ranks:
                by_size.setdefault(int(r["size_bytes"]), []).append(float(r["median_ms"]) * 1e-3)
    return [(s, sorted(ts)[len(ts) // 2]) for s, ts in sorted(by_size.items())]


def scale_up(topology):
    link = topology["node"]["scale_up"]["link"]
    bandwidth = link["line_rate_bytes_per_s"]["value"] * link["efficiency"]["value"]
    route_latency = 2 * link["latency_s"]["value"]  # GPU -> NVSwitch -> GPU
    return bandwidth, route_latency


def protocol_times(protocols, bandwidth, route_latency, ranks, size):
    steps = 2 * (ranks - 1)
    return [p["base"] + steps * (route_latency + p["step"]) + steps * size / ranks / (bandwidth * p["eff"])
            for p in protocols]


# NCCL src/graph/tuning.cc: base latency of the Ring LL protocol, and llMaxBws, the most an LL ring
# moves on one node, by GPU generation (GB/s).
NCCL_LL_BASE_S = 6.6e-6
NCCL_LL_MAX_GBPS = {"hopper": 141.0, "ampere": 87.7}
# nccl-tests on 8 H20 (Hopper: NVLink4 through NVSwitch, as the H100 and H200), all_reduce_perf
# in one node (deepseek-ai/DeepEP#303): microseconds at 4 B, 1 KiB, 4 KiB.
H20_NCCL_TESTS_US = {4: 12.49, 1024: 16.38, 4096: 16.69}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machine", required=True, help="h100_dgx or a100_dgx")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--ll-from-nccl", choices=sorted(NCCL_LL_MAX_GBPS),
                    help="LL at NCCL's own constants for this GPU generation (not fitted); LL128 fitted beside it")
    ap.add_argument("--write", action="store_true", help="write the protocols into the topology file")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file does not hold what --write would write")
    ap.add_argument("--assumed-for", help="another machine of the same NVLink and NVSwitch: marked an estimate for it")
    args = ap.parse_args()
    path = os.path.join(ROOT, args.topology)
    text = open(path).read()
    topology = json.loads(text)
    comm = topology["communication"]
    ranks = topology["node"]["devices_per_node"]
    bandwidth, route_latency = scale_up(topology)
    simple = {"base": comm["collective_base_latency_s"]["value"], "step": comm["sm_step_latency_s"]["value"],
              "eff": comm["sm_kernel_efficiency"]["value"]}
    # Every single-node curve of the machine (2, 4, ... GPUs): the per-step latency is told apart from
    # the per-collective one only by curves of several rank counts.
    points = [(n, s, t) for n in (2, 4, 8, 16) if n <= ranks for s, t in curve(args.machine, n)]
    ll_fixed = None
    if args.ll_from_nccl:
        # vidur's timings below a few MiB sit on a per-call floor of 30-45 us (2 GPUs: 41-43 us from
        # 64 KiB to 4 MiB), which a protocol fitted to them takes as its latency: LL is NCCL's own.
        ll_fixed = {"base": NCCL_LL_BASE_S, "step": 0.0,
                    "eff": min(LL_SHARE, NCCL_LL_MAX_GBPS[args.ll_from_nccl] * 1e9 / bandwidth)}

    def unpack(x):
        # A protocol moves at most its payload share of the wire: LL 4 data bytes per 8 (a flag per
        # word), LL128 120 per 128 (NCCL src/device/prims_ll.h, prims_ll128.h).
        ll128 = {"base": math.exp(x[-3]), "step": math.exp(x[-2]), "eff": LL128_SHARE / (1 + math.exp(-x[-1]))}
        if ll_fixed:
            return [ll_fixed, ll128]
        return [{"base": math.exp(x[0]), "step": math.exp(x[1]), "eff": LL_SHARE / (1 + math.exp(-x[2]))}, ll128]

    def loss(x):
        ps = [simple] + unpack(x)
        return sum(math.log(min(protocol_times(ps, bandwidth, route_latency, n, s)) / t) ** 2
                   for n, s, t in points) / len(points)

    # Start from NCCL's constants (measurements.md: base LL 6.6 us, LL128 14 us; per NVLink hop 0.6,
    # 1.9 us) and its protocols' payload shares (LL: 4 data bytes per 8; LL128: 120 per 128).
    x = [math.log(14e-6), math.log(1.3e-6), 2.0]
    if not ll_fixed:
        x = [math.log(6.6e-6), math.log(0.3e-6), 0.0] + x
    steps = [0.5] * len(x)
    for _ in range(3):
        x = nelder_mead(loss, x, steps, 4000)
        steps = [s / 2 for s in steps]
    ll, ll128 = unpack(x)
    ps = [simple, ll, ll128]
    errs = [abs(min(protocol_times(ps, bandwidth, route_latency, n, s)) / t - 1) for n, s, t in points]
    counts = sorted({n for n, _, _ in points})
    assumed = "" if args.assumed_for is None else f"estimate: assumed for {args.assumed_for} (the same NVLink and NVSwitch), "
    src = (assumed + f"fitted by tools/calibration/fit_collectives.py to microsoft/vidur {args.machine} all_reduce, "
           f"{'/'.join(map(str, counts))} GPUs of one node, {len(points)} points (MIT; "
           f"tools/calibration/raw/vidur/network), Simple fixed{', LL at NCCL' + chr(39) + 's' if ll_fixed else ''}; "
           f"mean |error| {100 * sum(errs) / len(errs):.1f}%")
    if ll_fixed:
        h20 = "; ".join(f"{s} B {us:.1f} us" for s, us in H20_NCCL_TESTS_US.items())
        ours = min(protocol_times(ps, bandwidth, route_latency, 8, 4096)) * 1e6
        check = (f"nccl-tests all_reduce_perf on 8 H20 (Hopper: NVLink4 through NVSwitch), deepseek-ai/DeepEP#303: "
                 f"{h20}; 8 GPUs at 4 KiB priced {ours:.1f} us" if args.ll_from_nccl == "hopper" else
                 f"8 GPUs at 4 KiB priced {ours:.1f} us; no nccl-tests curve of this GPU at these sizes is in the project")
        ll_src = (assumed + f"NCCL src/graph/tuning.cc: base latency Ring LL {NCCL_LL_BASE_S * 1e6:.1f} us; per NVLink "
                  f"hop LL 0.6 us, which the route's links carry (step 0); bandwidth llMaxBw "
                  f"{NCCL_LL_MAX_GBPS[args.ll_from_nccl]:.1f} GB/s ({args.ll_from_nccl}, one node) over the ring's "
                  f"link {bandwidth / 1e9:.2f} GB/s. Not fitted: vidur's curves below a few MiB carry a per-call floor "
                  f"of 30-45 us. {check}")
    # A protocol that is fastest at no measured point is not determined by the curves: left out (the
    # simulated ring then never picks it either). A fixed LL stays.
    used = {min(range(3), key=lambda k: protocol_times(ps, bandwidth, route_latency, n, s)[k]) for n, s, _ in points}
    block = {}
    for k, (name, p) in enumerate((("ll", ll), ("ll128", ll128)), start=1):
        if k not in used and not (ll_fixed and name == "ll"):
            continue
        source = ll_src if ll_fixed and name == "ll" else src
        block[name] = {"base_latency_s": {"value": float(f"{p['base']:.4g}"), "source": source},
                       "step_latency_s": {"value": float(f"{p['step']:.4g}"), "source": source},
                       "efficiency": {"value": float(f"{p['eff']:.4g}"), "source": source}}
    print(json.dumps(block, indent=2))
    print(f"{len(points)} sizes, mean |error| {100 * sum(errs) / len(errs):.1f}%, max {100 * max(errs):.1f}%",
          file=sys.stderr)
    updated = with_communication_key(text, "protocols", block)
    if args.check and updated != text:
        print(f"{args.topology}: communication.protocols differs from what the fit writes", file=sys.stderr)
        return 1
    if args.write:
        with open(path, "w") as f:
            f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
