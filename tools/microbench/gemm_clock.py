#!/usr/bin/env python3
"""Times each GEMM shape at the clock it gets after an idle GPU and at the clock it keeps under
continuous load, to show how much of a "GEMM time" the power limit decides (docs/microbench.md,
"Power").

For each shape, F.linear(x[m,k], w[n,k]) (nn.Linear's forward) on standard-normal bf16 operands:
  cold       after --idle-s of host sleep, one launch timed alone (it also pays the CPU's wake-up:
             the start event is recorded before the launch reaches the GPU)
  burst      after --idle-s of host sleep, two launches queued, the third timed (full clock)
  sustained  after --sustain-s of back-to-back launches, samples of >= 1 ms back-to-back launches
             (the clock the power limit leaves)
with the SM clock read through NVML (torch.cuda.clock_rate) before the cold launch and around the
sustained samples. Medians of --samples samples each.

  python3 gemm_clock.py -o clock.json --plan tools/calibration/raw/microbench/plan-train-steps.json \
      --plan tools/calibration/raw/microbench/plan-mpt-3b.json

Standard library plus torch. Writes one JSON document (schema "fusesim.gemm-clock-study").
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm_layout  # noqa: E402  (its timer and its writer)


def read_shapes(plans):
    shapes = []
    for path in plans:
        with open(path) as f:
            for g in json.load(f)["gemm"]:
                t = (g["m"], g["n"], g["k"])
                if g.get("batch", 1) == 1 and t not in shapes:
                    shapes.append(t)
    return shapes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--plan", action="append", required=True, help="a plan from `fusesim calibrate plan` (repeatable)")
    p.add_argument("--idle-s", type=float, default=0.1, help="host sleep before each cold or burst sample")
    p.add_argument("--sustain-s", type=float, default=0.6, help="back-to-back load before the sustained samples")
    p.add_argument("--samples", type=int, default=5, help="cold and burst samples per shape (sustained: twice)")
    args = p.parse_args(argv)

    import torch
    dev = torch.device("cuda", 0)

    def once(fn, inner):
        return gemm_layout.once(torch, fn, inner)

    def clock_mhz():
        try:
            return torch.cuda.clock_rate(dev)
        except Exception:  # noqa: BLE001 - NVML missing: no clock readings
            return -1

    def median(x):
        return sorted(x)[len(x) // 2]

    rows = []
    for m, n, k in read_shapes(args.plan):
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        w = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        fn = lambda: torch.nn.functional.linear(a, w)  # noqa: E731
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        cold, idle_clock = [], []
        for _ in range(args.samples):
            time.sleep(args.idle_s)
            idle_clock.append(clock_mhz())
            cold.append(once(fn, 1))
        burst = []
        for _ in range(args.samples):
            time.sleep(args.idle_s)
            fn()
            fn()
            burst.append(once(fn, 1))
        t0 = time.time()
        while time.time() - t0 < args.sustain_s:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        sustained_clock = [clock_mhz()]
        inner = max(1, int(1e-3 / cold[0]))
        sustained = [once(fn, inner) for _ in range(2 * args.samples)]
        sustained_clock.append(clock_mhz())
        row = {"m": m, "n": n, "k": k, "cold_us": median(cold) * 1e6, "burst_us": median(burst) * 1e6,
               "sustained_us": median(sustained) * 1e6, "clk_idle": idle_clock[-1], "clk_sustained": sustained_clock,
               "cold": cold, "burst": burst, "sustained": sustained}
        print("%5d x %5d x %5d cold %.1f burst %.1f sustained %.1f us  clk idle %s sustained %s"
              % (m, n, k, row["cold_us"], row["burst_us"], row["sustained_us"], idle_clock[-1], sustained_clock),
              flush=True)
        rows.append(row)
        del a, w
    doc = {
        "schema": "fusesim.gemm-clock-study",
        "schema_version": 1,
        "provenance": {
            "kind": "measured",
            "machine": socket.gethostname(),
            "device": torch.cuda.get_device_name(dev),
            "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["tools/microbench/gemm_clock.py"] + (argv if argv is not None else sys.argv[1:])),
        },
        "shapes": rows,
    }
    gemm_layout.write_document(args.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
