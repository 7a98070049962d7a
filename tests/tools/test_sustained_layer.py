#!/usr/bin/env python3
"""tools/microbench/sustained.py's layer: the GEMM shapes one TP rank runs, forward and backward, and
its summary ratios, against hand-derived values; runs without torch (only main() imports it)."""
import os
import sys

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
print("sustained.py layer shapes: ok")
