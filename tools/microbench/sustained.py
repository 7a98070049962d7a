#!/usr/bin/env python3
"""Does a GPU hold its GEMM rate when it runs a training step's GEMMs back to back for a minute?

Kernel profiles (vidur's, microbench.py's) time each shape for a fraction of a second on a GPU that
was idle just before; a training step keeps the GPU busy for seconds at full power, where power and
temperature limits may lower the SM clock. This script measures both on one GPU:

  burst:     each GEMM of the mix timed alone after the GPU idled (warm-up, then `--burst-repeats`
             launches), as a kernel profile times it;
  sustained: the whole mix (a layer's forward and backward GEMMs) looped for `--seconds`, its rate
             recorded per window, while `nvidia-smi` samples SM clock, power, temperature and the
             active clock-event (throttle) reasons.

  python3 tools/microbench/sustained.py -o sustained.json                      # Llama-3-70B, TP 8
  python3 tools/microbench/sustained.py -o s.json --hidden 4096 --ffn 14336 --tp 1 --kv-heads 8

The mix is one transformer layer of a Llama-style model under tensor parallelism: QKV, attention
output, gated MLP up (gate and up fused) and down projections, forward (Y = X W) and backward (dgrad
and wgrad of each). Output: JSON with every window and every nvidia-smi sample (docs/microbench.md,
"Sustained clocks").
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time

SMI_FIELDS = ["clocks.sm", "clocks.mem", "power.draw", "power.limit", "temperature.gpu", "clocks_event_reasons.active"]


def log(msg):
    print("sustained: " + msg, file=sys.stderr, flush=True)


def layer_gemms(tokens, hidden, ffn, heads, kv_heads, tp):
    """(name, m, n, k) of one layer's GEMMs on one TP rank, forward then backward."""
    head_dim = hidden // heads
    qkv = (heads + 2 * kv_heads) * head_dim // tp
    forward = [("qkv", tokens, qkv, hidden), ("attn_out", tokens, hidden, hidden // tp),
               ("mlp_up", tokens, 2 * ffn // tp, hidden), ("mlp_down", tokens, hidden, ffn // tp)]
    out = [("fwd_" + name, m, n, k) for name, m, n, k in forward]
    for name, m, n, k in reversed(forward):
        out.append(("dgrad_" + name, m, k, n))  # dX = dY W^T: [m, n] x [n, k]
        out.append(("wgrad_" + name, k, n, m))  # dW = X^T dY: [k, m] x [m, n]
    return out


class SmiSampler:
    """nvidia-smi's own loop (-lms) in a child process; its CSV lines are read on a thread."""

    def __init__(self, period_ms):
        self.rows = []
        self.proc = None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits",
                 "-lms", str(period_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            log("nvidia-smi not available (%s): no clock samples" % e)
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != len(SMI_FIELDS):
                continue
            row = {"t_s": time.monotonic()}
            for field, value in zip(SMI_FIELDS, parts):
                try:
                    row[field] = float(value) if field != "clocks_event_reasons.active" else value
                except ValueError:
                    row[field] = value
            self.rows.append(row)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.thread.join(timeout=10)
        return self.rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--tokens", type=int, default=8192, help="tokens per micro-batch (GEMM M)")
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--seconds", type=float, default=90.0, help="length of the sustained loop")
    p.add_argument("--window-s", type=float, default=1.0, help="rate recorded per window of this length")
    p.add_argument("--idle-s", type=float, default=10.0, help="idle before the burst timings")
    p.add_argument("--burst-repeats", type=int, default=20)
    p.add_argument("--smi-period-ms", type=int, default=250)
    args = p.parse_args()

    import torch

    dev = torch.device("cuda", 0)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    gemms = layer_gemms(args.tokens, args.hidden, args.ffn, args.heads, args.kv_heads, args.tp)
    ops = []
    for name, m, n, k in gemms:
        a = torch.randn(m, k, dtype=dt, device=dev)
        b = torch.randn(k, n, dtype=dt, device=dev)
        c = torch.empty(m, n, dtype=dt, device=dev)
        ops.append((name, m, n, k, a, b, c))
    mix_flop = sum(2.0 * m * n * k for _, m, n, k, *_ in ops)

    def event():
        return torch.cuda.Event(enable_timing=True)

    smi = SmiSampler(args.smi_period_ms)
    t0 = time.monotonic()

    # Burst: as a kernel profile measures, after the GPU idled.
    for _, _, _, _, a, b, c in ops:
        torch.matmul(a, b, out=c)  # cuBLAS heuristics and workspaces, before the idle
    torch.cuda.synchronize()
    time.sleep(args.idle_s)
    burst_start = time.monotonic()
    burst = []
    for name, m, n, k, a, b, c in ops:
        for _ in range(3):
            torch.matmul(a, b, out=c)
        s, e = event(), event()
        s.record()
        for _ in range(args.burst_repeats):
            torch.matmul(a, b, out=c)
        e.record()
        e.synchronize()
        t = s.elapsed_time(e) / 1e3 / args.burst_repeats
        burst.append({"name": name, "m": m, "n": n, "k": k, "time_s": t, "tflops": 2.0 * m * n * k / t / 1e12})
    burst_end = time.monotonic()
    burst_time = sum(x["time_s"] for x in burst)
    log("burst: mix of %d GEMMs %.3f ms, %.1f TFLOP/s" % (len(ops), burst_time * 1e3, mix_flop / burst_time / 1e12))

    # Sustained: the mix back to back; one pair of events per mix, summed into windows. The host
    # stays at most `ahead` mixes in front of the GPU so that window boundaries are real time.
    windows = []
    pending = []
    ahead = 4
    loop_start = time.monotonic()
    window_start, window_gpu_s, window_mixes = loop_start, 0.0, 0
    while time.monotonic() - loop_start < args.seconds:
        s, e = event(), event()
        s.record()
        for _, _, _, _, a, b, c in ops:
            torch.matmul(a, b, out=c)
        e.record()
        pending.append((s, e))
        if len(pending) > ahead:
            s0, e0 = pending.pop(0)
            e0.synchronize()
            window_gpu_s += s0.elapsed_time(e0) / 1e3
            window_mixes += 1
        now = time.monotonic()
        if now - window_start >= args.window_s and window_mixes:
            windows.append({"t_s": window_start - t0, "mixes": window_mixes, "mix_s": window_gpu_s / window_mixes,
                            "tflops": mix_flop * window_mixes / window_gpu_s / 1e12})
            window_start, window_gpu_s, window_mixes = now, 0.0, 0
    torch.cuda.synchronize()
    loop_end = time.monotonic()
    rows = smi.stop()
    for r in rows:
        r["t_s"] -= t0

    def smi_between(lo, hi):
        sel = [r for r in rows if lo - t0 <= r["t_s"] <= hi - t0 and isinstance(r.get("clocks.sm"), float)]
        if not sel:
            return None
        return {"sm_mhz_mean": sum(r["clocks.sm"] for r in sel) / len(sel),
                "sm_mhz_min": min(r["clocks.sm"] for r in sel),
                "power_w_mean": sum(r["power.draw"] for r in sel if isinstance(r.get("power.draw"), float)) / len(sel),
                "temperature_c_max": max(r["temperature.gpu"] for r in sel if isinstance(r.get("temperature.gpu"), float)),
                "reasons": sorted({r["clocks_event_reasons.active"] for r in sel}), "samples": len(sel)}

    tail = [w for w in windows if w["t_s"] >= (loop_end - t0) - 10.0]
    head = windows[:3]
    summary = {
        "burst_tflops": mix_flop / burst_time / 1e12,
        "sustained_first_3_windows_tflops": sum(w["tflops"] for w in head) / max(1, len(head)),
        "sustained_last_10s_tflops": sum(w["tflops"] for w in tail) / max(1, len(tail)),
        "burst_smi": smi_between(burst_start, burst_end),
        "sustained_last_10s_smi": smi_between(loop_end - 10.0, loop_end),
    }
    summary["last_10s_over_burst"] = summary["sustained_last_10s_tflops"] / summary["burst_tflops"]
    props = torch.cuda.get_device_properties(dev)
    doc = {
        "schema": "fusesim.sustained-gemm", "schema_version": 1,
        "device": {"name": torch.cuda.get_device_name(dev), "sm_count": props.multi_processor_count},
        "machine": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "tool": "tools/microbench/sustained.py " + " ".join(sys.argv[1:]),
        "config": vars(args), "mix_flop": mix_flop, "summary": summary, "burst": burst,
        "windows": windows, "smi": rows,
    }
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.output)
    log(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
