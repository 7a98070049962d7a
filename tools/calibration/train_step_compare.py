#!/usr/bin/env python3
"""Compare training steps measured on one GPU (tools/microbench/train_step.py) with fusesim's.

For each measured case, fusesim simulates the same model (the case's workload with its layers and
micro-batch, TP = UP = DP = 1, baseline schedule, a whole step) on the given topology's first GPU and
writes a trace; both sides are summed by kernel class:

  gemm, attention, norm (LayerNorm/RMSNorm, forward and backward), activation (GeLU/SiLU and
  backward), residual (adds), loss (softmax cross-entropy), embedding (lookup, gradient),
  optimizer (the multi-tensor kernels of the optimizer step: gradient casts, clipping, Adam,
  parameter copies), other (copies, casts, fills and element-wise kernels no class names: on the
  measured side the logits' fp32 casts and the zeroed loss gradient land here, the QKV gradient's
  concatenation too);

and the step: measured as the median wall time of the timed steps, predicted as the step time.

  python3 tools/calibration/train_step_compare.py tools/calibration/raw/microbench/h100-sxm-2026-11-26-train-steps.json \
      --fusesim build/fusesim --topology dgx-h100

Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

CLASSES = ["gemm", "attention", "norm", "activation", "residual", "loss", "embedding", "optimizer", "other"]


def measured_class(name):
    """The class of a measured kernel by its name (PyTorch 2.x / cuBLAS / FlashAttention names)."""
    n = name.lower()
    if optimizer_kernel(name):
        return "optimizer"
    if "flash" in n or "fmha" in n:
        return "attention"
    if n.startswith("nvjet") or "gemm" in n or "cutlass" in n or "xmma" in n:
        return "gemm"
    if "layer_norm" in n or "gammabeta" in n or "rms_norm" in n:
        return "norm"
    if "gelu" in n or "silu" in n:
        return "activation"
    if "cudafunctor_add" in n:
        return "residual"
    if "softmax" in n or "nll_loss" in n:
        return "loss"
    if any(k in n for k in ("compute_grad_weight", "sum_and_scatter", "radix_sort", "unique_by_key",
                            "vectorized_gather", "krn_partial", "devicescan", "indexselect", "embedding")):
        return "embedding"
    return "other"


def optimizer_kernel(name):
    """Kernels only the optimizer step launches in train_step.py's loop."""
    n = name.lower()
    return "multi_tensor_apply" in n or "lpnorm" in n


def measured_summary(case):
    ps = case["profiled_step"]
    by_class = dict.fromkeys(CLASSES, 0.0)
    for row in ps["by_name"]:
        by_class[measured_class(row["name"])] += row["total_us"] / 1e3
    phases = ps.get("phases_gpu_us", {})
    opt_ms = phases.get("optimizer", 0.0) / 1e3
    return {
        "step_ms": case["step_ms_median"],
        "gpu_busy_ms": ps["gpu_busy_us"] / 1e3,
        "forward_ms": phases.get("forward", 0.0) / 1e3,
        "optimizer_ms": opt_ms,
        "by_class_ms": by_class,
    }


def predicted_class(args):
    kind = args.get("kernel")
    if kind == "gemm":
        return "gemm"
    if kind == "attention":
        return "attention"
    op = args.get("elementwise_op", "")
    if args.get("phase") == "optimizer":
        return "optimizer"
    if op.startswith("layernorm") or op.startswith("rmsnorm"):
        return "norm"
    if op.startswith(("gelu", "silu", "swiglu", "act")):
        return "activation"
    if op == "add":
        return "residual"
    if op.startswith(("cross_entropy", "softmax")):
        return "loss"
    if op.startswith("embedding"):
        return "embedding"
    return "other"


def predict(fusesim, topology, repo, cfg, extra):
    with open(os.path.join(repo, cfg["workload"])) as f:
        w = json.load(f)
    w["name"] = "train-step-" + cfg["name"]
    w["model"]["layers"] = cfg["layers"]
    w["training"]["micro_batch"] = cfg["micro_batch"]
    w["training"]["grad_accumulation"] = 1
    w["parallel"] = {"tp": 1, "up": 1, "dp": 1}
    w["schedule"] = {"kind": "baseline"}
    # train_step.py's "mpt" style has MPT's biases (each linear's bias gradient a reduction kernel);
    # "plain" and "llama" have none.
    w["model"]["bias"] = cfg.get("style") == "mpt"
    # train_step.py runs PyTorch's SDPA (FlashAttention-2) and PyTorch's native norm kernels (LayerNorm,
    # or for "llama" the RMSNorm variant of the same kernels), whatever kernels the workload file's
    # published run had (the MPT runs' Triton attention).
    w["training"].pop("attention_time_factor", None)
    w["training"]["norm_kernel"] = "eager"
    if cfg.get("style") == "llama":
        # train_step.py's Llama is torchtitan's code in eager PyTorch: rotary embedding in complex
        # form, SwiGLU as silu then a multiply, K/V repeated (training.elementwise "eager"), unless
        # torch.compile fuses the element-wise ops around the GEMMs ("fused").
        w["model"]["rotary_embedding"] = True
        w["training"]["elementwise"] = "fused" if cfg.get("compile") else "eager"
    # train_step.py's "separate": q, k, v and the gate and up halves as linears of their own, as
    # torchtitan's Llama has them; otherwise one fused QKV and one FC1 linear.
    w["training"]["projections"] = "separate" if cfg.get("separate") else "fused"
    if "fp8" in cfg:
        # torchao's float8 linears (fusesim dtype fp8) or bf16; one GPU gathers no parameters.
        w["training"]["dtype"] = "fp8" if cfg["fp8"] else "bf16"
        w["training"].pop("fp8_param_gather", None)
        if not cfg["fp8"]:
            w["training"].pop("fp8_scaling", None)
    if "recompute" in cfg:
        w["training"]["recompute"] = cfg["recompute"]
    with tempfile.TemporaryDirectory() as tmp:
        wpath = os.path.join(tmp, "workload.json")
        tpath = os.path.join(tmp, "trace.json")
        with open(wpath, "w") as f:
            json.dump(w, f)
        cmd = [fusesim, "simulate", "--workload", wpath, "--topology", topology, "--scope", "step",
               "--schedule", "baseline", "--format", "json", "--trace", tpath] + extra
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit("fusesim failed (%d): %s" % (out.returncode, out.stderr.strip()))
        report = json.loads(out.stdout)
        with open(tpath) as f:
            trace = json.load(f)
    by_class = dict.fromkeys(CLASSES, 0.0)
    fwd = 0.0
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "compute" or e.get("pid") != 0:
            continue
        ms = e["dur"] / 1e3
        by_class[predicted_class(e["args"])] += ms
        if e["args"].get("phase") == "forward":
            fwd += ms
    run = report["results"][0]
    return {"step_ms": run["step_time_s"] * 1e3, "forward_ms": fwd,
            "optimizer_ms": by_class["optimizer"], "by_class_ms": by_class}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured")
    ap.add_argument("--fusesim", default="build/fusesim")
    ap.add_argument("--topology", default="dgx-h100")
    ap.add_argument("--roofline", action="store_true")
    # The steps were measured with torch 2.11 and CUDA 13: like with like is the profile of those
    # libraries (docs/calibration.md, "Which software a profile prices"); the default profile prices
    # the GEMMs of the published runs' libraries.
    ap.add_argument("--profile", help="calibration profile (simulate --profile), e.g. alternatives/h100-sxm-cuda13")
    ap.add_argument("--format", choices=["table", "json"], default="table")
    args = ap.parse_args()
    if args.roofline and args.profile:
        ap.error("--roofline and --profile exclude each other")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(args.measured) as f:
        doc = json.load(f)
    extra = ["--roofline"] if args.roofline else ["--profile", args.profile] if args.profile else []
    rows = []
    for name, case in doc["cases"].items():
        if "error" in case:
            continue
        m = measured_summary(case)
        p = predict(args.fusesim, args.topology, repo, case["config"], extra)
        rows.append({"case": name, "measured": m, "predicted": p,
                     "step_error": p["step_ms"] / m["step_ms"] - 1.0})
    if args.format == "json":
        json.dump({"device": doc["provenance"]["device"], "cases": rows}, sys.stdout, indent=1)
        print()
        return
    print("device: %s (%s)" % (doc["provenance"]["device"], args.measured))
    print("%-14s %10s %10s %8s   %s" % ("case", "meas (ms)", "pred (ms)", "error", "by class: measured / predicted ms"))
    for r in rows:
        m, p = r["measured"], r["predicted"]
        cls = "  ".join("%s %.1f/%.1f" % (c, m["by_class_ms"][c], p["by_class_ms"][c]) for c in CLASSES
                        if m["by_class_ms"][c] > 0.05 or p["by_class_ms"][c] > 0.05)
        print("%-14s %10.2f %10.2f %+7.1f%%   %s" % (r["case"], m["step_ms"], p["step_ms"], 100 * r["step_error"], cls))
        print("%-14s %10s %10s %8s   forward %.1f/%.1f  optimizer %.1f/%.1f  GPU busy %.1f of %.1f measured" % (
            "", "", "", "", m["forward_ms"], p["forward_ms"], m["optimizer_ms"], p["optimizer_ms"],
            m["gpu_busy_ms"], m["step_ms"]))


if __name__ == "__main__":
    main()
