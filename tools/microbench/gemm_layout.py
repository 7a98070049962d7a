#!/usr/bin/env python3
"""Times each GEMM shape in the three operand layouts a transformer layer's linear op uses, to find
how much of a GEMM's time its layout and its data decide (docs/microbench.md, "Operand layout").

An nn.Linear (Megatron-LM's and torchtitan's linear layers do the same) stores its weight as
[out, in] and computes, for tokens T:
  forward  y[T,out]  = x[T,in] @ W[out,in]^T      layout "nt" (F.linear)
  dgrad    dx[T,in]  = dy[T,out] @ W[out,in]      layout "nn" (torch.matmul of two row-major)
  wgrad    dW[out,in] = dy[T,out]^T @ x[T,in]     layout "tn" (the first operand a transposed view)
A shape (m, n, k) is timed in every layout (m x k times k x n), on standard-normal operands, and in
"nt" and "nn" once more with the second operand scaled to a weight's spread (std 0.02) to see whether
the data moves the time (power). The variants of one shape run round-robin so that clock drift
falls on all of them alike.

  python3 gemm_layout.py -o layout.json --plan tools/calibration/raw/microbench/plan-train-steps.json
  python3 gemm_layout.py -o layout.json --default-shapes      # microbench's default GEMM shapes too

Standard library plus torch. Writes one JSON document (schema "fusesim.gemm-layout-study").
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import microbench  # noqa: E402  (the plan reader and default shapes are microbench's own)

VARIANTS = ["nn", "nt", "tn", "nn_w002", "nt_w002"]


def operands(torch, variant, m, n, k, dt, device):
    weight_scale = 0.02 if variant.endswith("_w002") else 1.0
    layout = variant.split("_")[0]
    if layout == "nn":
        a = torch.randn(m, k, dtype=dt, device=device)
        b = torch.randn(k, n, dtype=dt, device=device) * weight_scale
        c = torch.empty(m, n, dtype=dt, device=device)
        return (a, b, c), lambda: torch.matmul(a, b, out=c)
    if layout == "nt":
        a = torch.randn(m, k, dtype=dt, device=device)
        w = torch.randn(n, k, dtype=dt, device=device) * weight_scale
        return (a, w), lambda: torch.nn.functional.linear(a, w)
    # tn: the first operand stored [k, m] and read transposed, as autograd's grad_output^T.
    at = torch.randn(k, m, dtype=dt, device=device)
    b = torch.randn(k, n, dtype=dt, device=device)
    c = torch.empty(m, n, dtype=dt, device=device)
    return (at, b, c), lambda: torch.matmul(at.t(), b, out=c)


def once(torch, fn, inner):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / inner


def write_document(path, doc):
    """Writes `doc` whole, then renames it into place: no half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--plan", action="append", default=[], help="a plan from `fusesim calibrate plan` (repeatable)")
    p.add_argument("--default-shapes", action="store_true", help="add microbench's default GEMM shapes")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--rounds", type=int, default=12, help="round-robin rounds (samples per variant)")
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)

    import torch
    device = torch.device("cuda", 0)
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    shapes = set()
    for plan in args.plan:
        gemms, _, _ = microbench.read_plan(plan)
        shapes.update((m, n, k) for (m, n, k, batch) in gemms if batch == 1)
    if args.default_shapes:
        shapes.update((m, n, k) for (m, n, k, batch) in microbench.default_gemm_shapes(False) if batch == 1)
    rows = []
    for m, n, k in sorted(shapes):
        held, fns = [], {}
        for v in VARIANTS:
            tensors, fn = operands(torch, v, m, n, k, dt, device)
            held.append(tensors)
            fns[v] = fn
        for v in VARIANTS:
            for _ in range(args.warmup):
                fns[v]()
        torch.cuda.synchronize()
        inner = {v: max(1, min(1000, int(1e-3 / max(once(torch, fns[v], 1), 1e-7)))) for v in VARIANTS}
        times = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for v in VARIANTS:
                times[v].append(once(torch, fns[v], inner[v]))
        del held, fns
        med = {v: sorted(t)[len(t) // 2] for v, t in times.items()}
        print("%6d x %6d x %6d  " % (m, n, k) + "  ".join("%s %8.1f us" % (v, med[v] * 1e6) for v in VARIANTS),
              flush=True)
        rows.append({"m": m, "n": n, "k": k, "dtype": args.dtype, "inner": inner, "times_s": times})

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,power.limit", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    doc = {
        "schema": "fusesim.gemm-layout-study",
        "schema_version": 1,
        "variants": {
            "nn": "torch.matmul(a[m,k], b[k,n]): nn.Linear's dgrad; microbench.py's GEMM",
            "nt": "F.linear(a[m,k], w[n,k]): nn.Linear's forward",
            "tn": "torch.matmul(a[k,m].t(), b[k,n]): nn.Linear's wgrad",
            "nn_w002": "nn with b scaled to std 0.02",
            "nt_w002": "nt with w scaled to std 0.02",
        },
        "provenance": {
            "kind": "measured",
            "machine": socket.gethostname(),
            "device": torch.cuda.get_device_name(device),
            "sm_count": torch.cuda.get_device_properties(device).multi_processor_count,
            "driver_and_power_limit": driver,
            "torch": torch.__version__,
            "cuda": torch.version.cuda or "unknown",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["tools/microbench/gemm_layout.py"] + (argv if argv is not None else sys.argv[1:])),
            "timing": "CUDA events around `inner` back-to-back launches (>= 1 ms), %d warm-up launches; variants "
                      "of a shape round-robin, %d rounds" % (args.warmup, args.rounds),
        },
        "shapes": rows,
    }
    write_document(args.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
