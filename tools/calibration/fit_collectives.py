#!/usr/bin/env python3
"""Fits the LL and LL128 protocols of a topology's ring collectives to a measured all-reduce curve.

  tools/calibration/fit_collectives.py --nccl-tests tools/calibration/raw/nccl-tests/FILE.json \
      --topology topologies/dgx-h100.json [--assumed-for "HGX H200"] [--fit-simple-base] [--write | --check]
  tools/calibration/fit_collectives.py --machine a100_dgx --topology topologies/dgx-a100.json \
      --ll-from-nccl ampere [--write | --check]

NCCL prices a collective per algorithm and protocol with one latency and one bandwidth
(src/graph/tuning.cc) and runs the cheapest for the size. fusesim's simulated ring does the same
(docs/engine.md, "Protocols"): a protocol p costs

    base_p + steps x (route latency + step_p) + steps x bytes / ranks / (link bandwidth x efficiency_p)

Simple keeps the topology's own constants (set from nccl-tests' large-message bandwidth and NCCL's
latencies), and so does NVLS where the topology has it (an all-reduce inside one node takes the
cheapest of all). The fit is Nelder-Mead on the squared log error of the fastest protocol's time.

With --nccl-tests (the H100 and, assumed, the H200): the curves are nccl-tests all_reduce_perf
tables of one node (tools/calibration/raw/nccl-tests/, each with its source and licence), each size's
time the faster of the out-of-place and in-place columns (the same collective timed twice: a one-off
stall shows in one of them), sizes from 1 KiB. One node's curve has one rank count, which cannot
tell a per-step latency from a per-collective one, so each protocol's per-step latency is NCCL's
NVLink hop for it (LL 0.6 us, LL128 1.9 us; the route carries 0.6) and its base latency and
efficiency are fitted (LL's efficiency bounded by its payload share, 4 data bytes per 8; LL128's by
120 per 128). With --fit-simple-base, Simple's base latency is fitted too (at least NCCL's 8.4 us;
its per-step latency and efficiency stay the topology's) and written as collective_base_latency_s:
on a ring without NVLS, Simple runs every size from a few tens of MiB up, where an A100 board's curve
reads 60-230 us above a ring with NCCL's Simple latency, and vidur's A100 curves 100-175 us on 2, 4 and
8 GPUs alike (a cost per collective, not per step: docs/calibration.md, "Collectives").

With --machine (the A100, of which no nccl-tests curve at small sizes is in the project): the
single-node all-reduce curves of tools/calibration/raw/vidur/network/<machine>_all_reduce.csv (2, 4
and 8 GPUs). With --ll-from-nccl, LL takes NCCL's own constants (base 6.6 us, its NVLink hop in the
route, NCCL's llMaxBw of the GPU generation as its bandwidth) and LL128 (base, step, efficiency) is
fitted beside it; without, both are fitted. vidur's timings below a few MiB sit on a per-call floor
of 30-45 us (NCCL kernel durations of calls launched one by one under the profiler: each kernel
waits for the slowest host's launch), which is why LL is not fitted on them (docs/calibration.md,
"Collectives"). --write sets communication.protocols in the file, the rest of it byte for byte;
--check exits 1 where the file holds something else. Deterministic.
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
# NCCL src/graph/tuning.cc, hwLat[NVLINK][RING]: the per-hop latency of LL and LL128 on NVLink.
NCCL_NVLINK_HOP_S = {"ll": 0.6e-6, "ll128": 1.9e-6}
# The smallest size an nccl-tests curve is fitted from: below it the times step with the element
# count (13-16 us for 8-512 B on 8 H100s), which no collective of a training step is.
NCCL_TESTS_MIN_BYTES = 1024


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


def nccl_tests_curve(path):
    """(ranks, [(bytes, seconds)]) of an nccl-tests all_reduce_perf curve of one node."""
    d = json.load(open(os.path.join(ROOT, path)))
    if d["test"] != "all_reduce_perf" or d["nodes"] != 1:
        raise SystemExit(f"{path}: an all_reduce_perf curve of one node is needed")
    if d["columns"] != ["bytes", "out_of_place_us", "in_place_us"]:
        raise SystemExit(f"{path}: columns must be bytes, out_of_place_us, in_place_us")
    return d["ranks"], [(b, min(oop, ip) * 1e-6) for b, oop, ip in d["rows"] if b >= NCCL_TESTS_MIN_BYTES]


def scale_up(topology):
    link = topology["node"]["scale_up"]["link"]
    bandwidth = link["line_rate_bytes_per_s"]["value"] * link["efficiency"]["value"]
    route_latency = 2 * link["latency_s"]["value"]  # GPU -> NVSwitch -> GPU
    return bandwidth, route_latency


def protocol_times(protocols, bandwidth, route_latency, ranks, size):
    steps = 2 * (ranks - 1)
    return [p["base"] + steps * (route_latency + p["step"]) + steps * size / ranks / (bandwidth * p["eff"])
            for p in protocols]


# NCCL src/graph/tuning.cc: base latency of the Ring LL and Simple protocols, and llMaxBws, the most an
# LL ring moves on one node, by GPU generation (GB/s).
NCCL_LL_BASE_S = 6.6e-6
NCCL_SIMPLE_BASE_S = 8.4e-6
NCCL_LL_MAX_GBPS = {"hopper": 141.0, "ampere": 87.7}


def sig(x):
    return 1 / (1 + math.exp(-x))


def main():
    ap = argparse.ArgumentParser()
    data = ap.add_mutually_exclusive_group(required=True)
    data.add_argument("--nccl-tests", action="append", metavar="FILE",
                      help="an nccl-tests all_reduce_perf curve of one node (repeatable): LL and LL128 fitted on it")
    data.add_argument("--machine", help="vidur's curves of h100_dgx or a100_dgx")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--ll-from-nccl", choices=sorted(NCCL_LL_MAX_GBPS),
                    help="with --machine: LL at NCCL's own constants for this GPU generation (not fitted); LL128 "
                         "fitted beside it")
    ap.add_argument("--write", action="store_true", help="write the protocols into the topology file")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file does not hold what --write would write")
    ap.add_argument("--assumed-for", help="another machine of the same NVLink and NVSwitch: marked an estimate for it")
    ap.add_argument("--fit-simple-base", action="store_true",
                    help="with --nccl-tests: fit Simple's base latency too (collective_base_latency_s)")
    args = ap.parse_args()
    if args.nccl_tests and args.ll_from_nccl:
        ap.error("--ll-from-nccl goes with --machine (an nccl-tests curve fits LL)")
    if args.fit_simple_base and not args.nccl_tests:
        ap.error("--fit-simple-base goes with --nccl-tests")
    path = os.path.join(ROOT, args.topology)
    text = open(path).read()
    topology = json.loads(text)
    comm = topology["communication"]
    ranks = topology["node"]["devices_per_node"]
    bandwidth, route_latency = scale_up(topology)
    simple = {"base": comm["collective_base_latency_s"]["value"], "step": comm["sm_step_latency_s"]["value"],
              "eff": comm["sm_kernel_efficiency"]["value"]}
    # NVLS reduces in the switch: the engine offers it to an all-reduce whose members share a node.
    nvls = None
    if "nvls" in comm:
        nvls = {"base": comm["nvls"]["base_latency_s"]["value"], "step": comm["nvls"]["step_latency_s"]["value"],
                "eff": comm["nvls"]["efficiency"]["value"]}
    assumed = "" if args.assumed_for is None else f"estimate: assumed for {args.assumed_for} (the same NVLink and NVSwitch), "

    if args.nccl_tests:
        points = []
        for f in args.nccl_tests:
            n, curve_points = nccl_tests_curve(f)
            if n > ranks:
                raise SystemExit(f"{f}: {n} ranks, more than a node of {args.topology} holds")
            points += [(n, s, t) for s, t in curve_points]
        steps_fixed = {k: v - route_latency for k, v in NCCL_NVLINK_HOP_S.items()}

        def unpack(x):
            fitted_simple = {**simple, "base": NCCL_SIMPLE_BASE_S + math.exp(x[4])} if args.fit_simple_base else simple
            return [fitted_simple,
                    {"base": math.exp(x[0]), "step": steps_fixed["ll"], "eff": LL_SHARE * sig(x[1])},
                    {"base": math.exp(x[2]), "step": steps_fixed["ll128"], "eff": LL128_SHARE * sig(x[3])}]

        # From NCCL's constants (base LL 6.6 us, LL128 8.4 us; Simple 8.4 us plus a few).
        x = [math.log(6.6e-6), 0.0, math.log(8.4e-6), 2.0] + ([math.log(10e-6)] if args.fit_simple_base else [])
    else:
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
            ll128 = {"base": math.exp(x[-3]), "step": math.exp(x[-2]), "eff": LL128_SHARE * sig(x[-1])}
            if ll_fixed:
                return [simple, ll_fixed, ll128]
            return [simple, {"base": math.exp(x[0]), "step": math.exp(x[1]), "eff": LL_SHARE * sig(x[2])}, ll128]

        # Start from NCCL's constants (measurements.md: base LL 6.6 us, LL128 14 us; per NVLink hop 0.6,
        # 1.9 us) and its protocols' payload shares (LL: 4 data bytes per 8; LL128: 120 per 128).
        x = [math.log(14e-6), math.log(1.3e-6), 2.0]
        if not ll_fixed:
            x = [math.log(6.6e-6), math.log(0.3e-6), 0.0] + x

    def candidates(simple, ll, ll128, n):
        ps = [simple, ll, ll128]
        if nvls is not None and n <= ranks:
            ps.append(nvls)
        return ps

    def fastest(simple, ll, ll128, n, s):
        return min(protocol_times(candidates(simple, ll, ll128, n), bandwidth, route_latency, n, s))

    def loss(x):
        simple, ll, ll128 = unpack(x)
        return sum(math.log(fastest(simple, ll, ll128, n, s) / t) ** 2 for n, s, t in points) / len(points)

    steps = [0.5] * len(x)
    for _ in range(3):
        x = nelder_mead(loss, x, steps, 4000)
        steps = [s / 2 for s in steps]
    simple, ll, ll128 = unpack(x)
    # Simple's base as written (four digits), so that the errors and the protocols kept are the file's.
    simple = {**simple, "base": float(f"{simple['base']:.4g}")}
    errs = [abs(fastest(simple, ll, ll128, n, s) / t - 1) for n, s, t in points]
    counts = sorted({n for n, _, _ in points})
    fit_error = f"mean |error| {100 * sum(errs) / len(errs):.1f}%"
    if args.nccl_tests:
        sizes = sorted({s for _, s, _ in points})
        src = (assumed + f"fitted by tools/calibration/fit_collectives.py to nccl-tests all_reduce_perf on "
               f"{'/'.join(map(str, counts))} GPUs of one node ({', '.join(args.nccl_tests)}), {len(points)} sizes of "
               f"{sizes[0]} B-{sizes[-1] / 2**30:g} GiB, the faster of out-of-place and in-place; "
               + ("Simple's base latency fitted with them (its per-step latency and efficiency the topology's)"
                  if args.fit_simple_base else "Simple")
               + f"{' and NVLS' if nvls else ''}{'' if args.fit_simple_base and not nvls else ' fixed'}, per-step "
               f"latency NCCL's NVLink hop (LL 0.6, LL128 1.9 us); {fit_error}")
        sources = {"ll": src, "ll128": src}
    else:
        src = (assumed + f"fitted by tools/calibration/fit_collectives.py to microsoft/vidur {args.machine} all_reduce, "
               f"{'/'.join(map(str, counts))} GPUs of one node, {len(points)} points (MIT; "
               f"tools/calibration/raw/vidur/network), Simple fixed{', LL at NCCL' + chr(39) + 's' if ll_fixed else ''}; "
               f"{fit_error}")
        sources = {"ll": src, "ll128": src}
        if ll_fixed:
            ours = fastest(simple, ll, ll128, 8, 4096) * 1e6
            sources["ll"] = (assumed + f"NCCL src/graph/tuning.cc: base latency Ring LL {NCCL_LL_BASE_S * 1e6:.1f} us; "
                             f"per NVLink hop LL 0.6 us, which the route's links carry (step 0); bandwidth llMaxBw "
                             f"{NCCL_LL_MAX_GBPS[args.ll_from_nccl]:.1f} GB/s ({args.ll_from_nccl}, one node) over the "
                             f"ring's link {bandwidth / 1e9:.2f} GB/s. Not fitted: vidur's curves below a few MiB carry "
                             f"a per-call floor of 30-45 us. 8 GPUs at 4 KiB priced {ours:.1f} us; no nccl-tests curve "
                             f"of this GPU at these sizes is in the project")
    # A protocol that is fastest at no measured point is not determined by the curves: left out (the
    # simulated ring then never picks it either). A fixed LL stays.
    used = set()
    for n, s, _ in points:
        times = protocol_times(candidates(simple, ll, ll128, n), bandwidth, route_latency, n, s)
        used.add(min(range(len(times)), key=lambda k: times[k]))
    block = {}
    for k, (name, p) in enumerate((("ll", ll), ("ll128", ll128)), start=1):
        if k not in used and not (args.ll_from_nccl and name == "ll"):
            continue
        block[name] = {"base_latency_s": {"value": float(f"{p['base']:.4g}"), "source": sources[name]},
                       "step_latency_s": {"value": float(f"{p['step']:.4g}"), "source": sources[name]},
                       "efficiency": {"value": float(f"{p['eff']:.4g}"), "source": sources[name]}}
    print(json.dumps(block, indent=2))
    print(f"{len(points)} sizes, {fit_error}, max {100 * max(errs):.1f}%", file=sys.stderr)
    updated = with_communication_key(text, "protocols", block)
    if args.fit_simple_base:
        print(f"collective_base_latency_s {simple['base']:.4g}", file=sys.stderr)
        updated = with_communication_key(updated, "collective_base_latency_s",
                                         {"value": simple["base"], "source": src})
    if args.check and updated != text:
        print(f"{args.topology}: communication.protocols (or collective_base_latency_s) differs from what the fit "
              f"writes", file=sys.stderr)
        return 1
    if args.write:
        with open(path, "w") as f:
            f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
