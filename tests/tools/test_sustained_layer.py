#!/usr/bin/env python3
"""tools/microbench/sustained.py without a GPU: the GEMM shapes one TP rank runs in a layer, forward
and backward, against hand-derived values; and --apply, which turns the committed step-mix runs into
the shipped profiles' device.step_rate_fraction (runs without torch: only a measuring main() imports it)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "microbench"))
import sustained  # noqa: E402

# Llama-3-70B at TP 8, 8192 tokens: head_dim 8192 / 64 = 128; QKV N = (64 + 2 x 8) x 128 / 8 = 1280,
# K = 8192; output projection N = 8192, K = 8192 / 8 = 1024; gated MLP up N = 2 x 28672 / 8 = 7168;
# down K = 28672 / 8 = 3584. Backward in reverse: dgrad (m, k, n) and wgrad (k, n, m) of each.
got = sustained.layer_gemms(8192, 8192, 28672, 64, 8, 8)
forward = [("fwd_qkv", 8192, 1280, 8192), ("fwd_attn_out", 8192, 8192, 1024),
           ("fwd_mlp_up", 8192, 7168, 8192), ("fwd_mlp_down", 8192, 8192, 3584)]
backward = [("dgrad_mlp_down", 8192, 3584, 8192), ("wgrad_mlp_down", 3584, 8192, 8192),
            ("dgrad_mlp_up", 8192, 8192, 7168), ("wgrad_mlp_up", 8192, 7168, 8192),
            ("dgrad_attn_out", 8192, 1024, 8192), ("wgrad_attn_out", 1024, 8192, 8192),
            ("dgrad_qkv", 8192, 8192, 1280), ("wgrad_qkv", 8192, 1280, 8192)]
assert got == forward + backward, got
# Every backward GEMM does the FLOPs of its forward one: 2 m n k equal per pair.
flops = {name: 2 * m * n * k for name, m, n, k in got}
for name in ("qkv", "attn_out", "mlp_up", "mlp_down"):
    assert flops["fwd_" + name] == flops["dgrad_" + name] == flops["wgrad_" + name], name

# --apply: the mean of the committed runs per kind, rounded to 3 places, is what each shipped profile
# carries (H100: GEMM (0.962 + 0.985) / 2 = 0.973, attention 0.911, element-wise 0.977).
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
for device in ("h100", "h200"):
    runs = sorted(glob.glob(os.path.join(root, "tools", "calibration", "raw", "microbench",
                                         device + "-sxm-2026-11-26-step-mix-*.json")))
    assert len(runs) == 2, runs
    shipped = json.load(open(os.path.join(root, "profiles", device + "-sxm.json")))["device"]["step_rate_fraction"]
    with tempfile.TemporaryDirectory() as tmp:
        profile = os.path.join(tmp, "p.json")
        shutil.copy(os.path.join(root, "profiles", device + "-sxm.json"), profile)
        subprocess.run([sys.executable, os.path.join(root, "tools", "microbench", "sustained.py"), "--apply", *runs,
                        "--profile", profile], check=True)
        written = json.load(open(profile))["device"]["step_rate_fraction"]
    assert {k: v["value"] for k, v in written.items()} == {k: v["value"] for k, v in shipped.items()}, (written, shipped)
    assert all(os.path.basename(runs[0]) in v["source"] for v in written.values())
print("sustained.py layer shapes and --apply: ok")
