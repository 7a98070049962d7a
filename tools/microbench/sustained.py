#!/usr/bin/env python3
"""How fast does each kind of kernel run inside a training step, against the burst a profile times?

Kernel profiles (vidur's, microbench.py's) time each op repeated back to back for a fraction of a
second, often on a GPU that was idle just before: its operands stay in the L2 and the clock is high.
Inside a step each op follows another and the GPU has run at full power for seconds, where its power
limit lowers the SM clock. This script measures both on one GPU:

  burst:     each op of the mix timed alone after the GPU idled (warm-up, then `--burst-repeats`
             launches), as a kernel profile times it;
  in step:   the whole mix (one layer) looped for `--seconds`, every op timed in place, its rate
             recorded per window, while `nvidia-smi` samples SM clock, power, temperature and the
             active clock-event (throttle) reasons.

  python3 tools/microbench/sustained.py -o s70b.json --kinds gemm,attention,memory       # Llama-3-70B, TP 8
  python3 tools/microbench/sustained.py -o s8b.json --kinds gemm,attention,memory \
      --hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --tp 1                            # Llama-3-8B, TP 1
  python3 tools/microbench/sustained.py --apply s70b.json s8b.json --profile h100.json   # no GPU

The mix is one transformer layer of a Llama-style model under tensor parallelism: QKV, attention
output, gated MLP up (gate and up fused) and down projections, forward (Y = X W) and backward (dgrad
and wgrad of each); with --kinds also FlashAttention forward and backward (scaled_dot_product_attention,
causal) and memory-bound kernels (LayerNorm, residual add). Each op of the loop is timed with its own
pair of events, so the rate per kind (GEMM, attention, memory-bound) is measured at the power cap
against its own burst. Output: JSON with every window and every nvidia-smi sample
(docs/microbench.md, "Power").
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


# sustained.py's kinds and the profile's step_rate_fraction keys (docs/calibration.md).
PROFILE_KIND = {"gemm": "gemm", "attention": "attention", "memory": "elementwise"}


def step_rate_fractions(runs):
    """{profile kind: (mean ratio rounded to 3 places, source text)} over sustained.py outputs."""
    by_kind = {}
    for path, doc in runs:
        for kind, ratio in doc["summary"].get("rate_ratio_by_kind", {}).items():
            by_kind.setdefault(PROFILE_KIND[kind], []).append((path, doc, ratio))
    out = {}
    for kind, rows in sorted(by_kind.items()):
        mean = round(sum(r for _, _, r in rows) / len(rows), 3)
        parts = ["%s: %.3f (%s, %s, %s)" % (os.path.basename(path), r, doc["device"]["name"], doc["date"],
                                            " ".join(doc["tool"].split()[1:]))
                 for path, doc, r in rows]
        out[kind] = (mean, "measured with tools/microbench/sustained.py (burst time / in-step time of the %s "
                           "kernels of a layer loop at the power limit), mean of %s" % (kind, "; ".join(parts)))
    return out


def apply_to_profile(profile_path, run_paths):
    """Writes device.step_rate_fraction of a calibration profile from sustained.py outputs."""
    runs = []
    for path in run_paths:
        with open(path) as f:
            runs.append((path, json.load(f)))
    with open(profile_path) as f:
        profile = json.load(f)
    fractions = step_rate_fractions(runs)
    if not fractions:
        raise SystemExit("sustained: no rate_ratio_by_kind in %s" % ", ".join(run_paths))
    profile["device"]["step_rate_fraction"] = {k: {"value": v, "source": src} for k, (v, src) in fractions.items()}
    tmp = profile_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(profile, f, indent=1)
        f.write("\n")
    os.replace(tmp, profile_path)
    log("wrote device.step_rate_fraction of %s: %s" % (
        profile_path, ", ".join("%s %.3f" % (k, v) for k, (v, _) in fractions.items())))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", help="JSON of this run (required unless --apply)")
    p.add_argument("--apply", nargs="+", metavar="RUN", help="no GPU: write the mean ratios of these runs' outputs "
                   "into --profile as device.step_rate_fraction, and exit")
    p.add_argument("--profile", help="with --apply: the calibration profile to write into")
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
    p.add_argument("--kinds", default="gemm", help="comma list: gemm (always), attention, memory")
    args = p.parse_args()
    if args.apply:
        if not args.profile:
            p.error("--apply needs --profile")
        apply_to_profile(args.profile, args.apply)
        return 0
    if not args.output:
        p.error("-o/--output is required")

    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    kinds = [k for k in args.kinds.split(",") if k]
    # (name, kind, flop, bytes, fn): the layer's ops in the order a step runs them.
    ops = []
    keep = []  # tensors the closures use
    for name, m, n, k in layer_gemms(args.tokens, args.hidden, args.ffn, args.heads, args.kv_heads, args.tp):
        a = torch.randn(m, k, dtype=dt, device=dev)
        b = torch.randn(k, n, dtype=dt, device=dev)
        c = torch.empty(m, n, dtype=dt, device=dev)
        keep += [a, b, c]
        ops.append((name, "gemm", 2.0 * m * n * k, 0.0, (lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))))
    if "attention" in kinds:
        heads, head_dim = args.heads // args.tp, args.hidden // args.heads
        shape = (1, heads, args.tokens, head_dim)
        q, k_, v = (torch.randn(*shape, dtype=dt, device=dev, requires_grad=True) for _ in range(3))
        out = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
        g = torch.randn_like(out)
        keep += [q, k_, v, out, g]
        # Causal: half the 4 x s^2 x heads x head_dim of the forward; the backward 2.5x the forward.
        fwd_flop = 2.0 * args.tokens * args.tokens * heads * head_dim

        def attn_fwd(q=q, k_=k_, v=v):
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k_, v, is_causal=True)

        ops.insert(1, ("attention_fwd", "attention", fwd_flop, 0.0, attn_fwd))
        ops.append(("attention_bwd", "attention", 2.5 * fwd_flop, 0.0,
                    (lambda: torch.autograd.grad(out, (q, k_, v), g, retain_graph=True))))
    if "memory" in kinds:
        x = torch.randn(args.tokens, args.hidden, dtype=dt, device=dev)
        y = torch.randn_like(x)
        z = torch.empty_like(x)
        keep += [x, y, z]
        nbytes = x.numel() * x.element_size()
        ops.insert(0, ("layernorm", "memory", 0.0, 2.0 * nbytes, (lambda: F.layer_norm(x, (args.hidden,)))))
        ops.append(("residual_add", "memory", 0.0, 3.0 * nbytes, (lambda: torch.add(x, y, out=z))))
    mix_flop = sum(op[2] for op in ops if op[1] == "gemm")

    def event():
        return torch.cuda.Event(enable_timing=True)

    smi = SmiSampler(args.smi_period_ms)
    t0 = time.monotonic()

    # Burst: as a kernel profile measures, after the GPU idled.
    for op in ops:
        op[4]()  # cuBLAS heuristics, flash workspaces: before the idle
    torch.cuda.synchronize()
    time.sleep(args.idle_s)
    burst_start = time.monotonic()
    burst = []
    for name, kind, flop, nbytes, fn in ops:
        for _ in range(3):
            fn()
        s_, e_ = event(), event()
        s_.record()
        for _ in range(args.burst_repeats):
            fn()
        e_.record()
        e_.synchronize()
        t = s_.elapsed_time(e_) / 1e3 / args.burst_repeats
        row = {"name": name, "kind": kind, "time_s": t}
        if flop:
            row["tflops"] = flop / t / 1e12
        burst.append(row)
    burst_end = time.monotonic()
    burst_time = {kind: sum(b["time_s"] for b in burst if b["kind"] == kind) for kind in {op[1] for op in ops}}
    log("burst: " + ", ".join("%s %.3f ms" % kv for kv in sorted((k, v * 1e3) for k, v in burst_time.items())))

    # Sustained: the mix back to back, an event before each op and one after the last, summed per kind
    # into windows. The host stays at most `ahead` mixes in front of the GPU so that window
    # boundaries are real time.
    windows = []
    pending = []
    ahead = 4
    loop_start = time.monotonic()
    window_start, window_mixes = loop_start, 0
    window_s = {kind: 0.0 for kind in burst_time}
    per_op_s = [0.0] * len(ops)
    counted_mixes = 0
    while time.monotonic() - loop_start < args.seconds:
        evs = [event() for _ in range(len(ops) + 1)]
        for ev, op in zip(evs, ops):
            ev.record()
            op[4]()
        evs[-1].record()
        pending.append(evs)
        if len(pending) > ahead:
            done = pending.pop(0)
            done[-1].synchronize()
            for idx, op in enumerate(ops):
                t = done[idx].elapsed_time(done[idx + 1]) / 1e3
                window_s[op[1]] += t
                if time.monotonic() - loop_start >= args.seconds - 10.0:
                    per_op_s[idx] += t
            if time.monotonic() - loop_start >= args.seconds - 10.0:
                counted_mixes += 1
            window_mixes += 1
        now = time.monotonic()
        if now - window_start >= args.window_s and window_mixes:
            w = {"t_s": window_start - t0, "mixes": window_mixes,
                 "kind_s": {k: v / window_mixes for k, v in window_s.items()}}
            w["tflops"] = mix_flop * window_mixes / window_s["gemm"] / 1e12
            windows.append(w)
            window_start, window_mixes = now, 0
            window_s = {kind: 0.0 for kind in burst_time}
    torch.cuda.synchronize()
    loop_end = time.monotonic()
    rows = smi.stop()
    for r in rows:
        r["t_s"] -= t0
    sustained_ops = [{"name": op[0], "kind": op[1], "time_s": per_op_s[i] / max(1, counted_mixes)}
                     for i, op in enumerate(ops)]

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
    gemm_burst_tflops = mix_flop / burst_time["gemm"] / 1e12
    summary = {
        "burst_tflops": gemm_burst_tflops,
        "sustained_first_3_windows_tflops": sum(w["tflops"] for w in head) / max(1, len(head)),
        "sustained_last_10s_tflops": sum(w["tflops"] for w in tail) / max(1, len(tail)),
        "burst_smi": smi_between(burst_start, burst_end),
        "sustained_last_10s_smi": smi_between(loop_end - 10.0, loop_end),
    }
    summary["last_10s_over_burst"] = summary["sustained_last_10s_tflops"] / gemm_burst_tflops
    # Per kind: burst time over the loop's last 10 s time (the rate's ratio, as for GEMMs).
    summary["rate_ratio_by_kind"] = {
        kind: burst_time[kind] / (sum(w["kind_s"][kind] for w in tail) / max(1, len(tail)))
        for kind in burst_time if tail}
    props = torch.cuda.get_device_properties(dev)
    doc = {
        "schema": "fusesim.sustained-gemm", "schema_version": 1,
        "device": {"name": torch.cuda.get_device_name(dev), "sm_count": props.multi_processor_count},
        "machine": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "tool": "tools/microbench/sustained.py " + " ".join(sys.argv[1:]),
        "config": vars(args), "mix_flop": mix_flop, "summary": summary, "burst": burst,
        "sustained_last_10s_per_op": sustained_ops, "windows": windows, "smi": rows,
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
