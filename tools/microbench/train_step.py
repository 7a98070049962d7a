#!/usr/bin/env python3
"""Time whole training steps of decoder-only transformers in eager PyTorch on one GPU.

A kernel profile says what each op costs alone; a published training run says what a whole step
costs on many GPUs, with a framework, a network and a configuration that are partly unknown. This
script measures the step between the two, on one GPU where nothing is unknown: the model as fusesim
emits it (or as llm-foundry's MPT and torchtitan's Llama build it), Megatron-style mixed precision
(bf16 parameters and activations, fp32 main gradients, global-norm clipping, fused AdamW on fp32
master weights, master copied back to bf16), no communication. For each case it records

  - the wall time of each timed step (CUDA synchronized at both ends, so launch gaps count);
  - one step under torch.profiler: every GPU kernel's name, count and total time, the union of the
    kernels' intervals (GPU busy) and the span of the step on the GPU (busy + idle gaps);
  - the peak memory allocated and nvidia-smi's view of the device.

`tools/calibration/train_step_compare.py` prices the same steps with fusesim and compares them by
kernel class (docs/validation.md, "Steps measured on one GPU").

  python3 tools/microbench/train_step.py -o steps.json --trace-dir traces/
  python3 tools/microbench/train_step.py -o steps.json --cases mpt-1b,llama3-8b-4l --steps 8

Requires PyTorch with CUDA; nothing else beyond the standard library.
"""

import argparse
import datetime
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# Each case names the fusesim workload whose model it builds, the layers kept (a whole 7B+ model with
# its optimizer does not fit one 80 GB GPU), the micro-batch, and the style of the layer:
#   plain: what fusesim emits (LayerNorm without bias, no linear biases, no position embedding, GeLU,
#          separate input embedding and LM head);
#   mpt:   llm-foundry v0.3.0's MPT as its benchmark yamls build it (learned position embeddings,
#          biases in linears and LayerNorms, exact GeLU, LM head tied to the input embedding);
#   llama: torchtitan's Llama (RMSNorm, SwiGLU, rotary embedding in complex form, K/V repeated for
#          grouped-query attention, no biases, untied head).
# Optional keys run the layer as torchtitan's train configs do (torchtitan/models/llama3/parallelize_llama.py
# at pytorch/torchtitan e7c0cae, the commit of its H200 benchmark):
#   separate: wq, wk, wv and w1, w3 as separate linears (torchtitan's Attention and FeedForward);
#   recompute "op": each block under torch.utils.checkpoint with torchtitan's per-op policy (save the outputs
#          of mm except every second one in forward order, of flash attention and of max; recompute the rest);
#   compile: torch.compile(block, fullgraph=True) per block, after the checkpoint wrapper, as apply_compile;
#   fp8: torchao's float8 training (convert_to_float8_training, the default tensorwise recipe: dynamic
#        per-tensor scales, e4m3 operands, e5m2 output gradients), the LM head left in bf16 (filter_fqns
#        ["output"]). Needs torchao importable (PYTHONPATH); torchao's C++ extensions are not used.
CASES = {
    "mpt-1b-plain": {"workload": "validation/workloads/mpt-1b-seq2048-8xh100-bf16.json", "layers": None,
                     "micro_batch": 8, "style": "plain"},
    "mpt-1b": {"workload": "validation/workloads/mpt-1b-seq2048-8xh100-bf16.json", "layers": None,
               "micro_batch": 8, "style": "mpt"},
    "mpt-7b-8l": {"workload": "validation/workloads/mpt-7b-seq2048-8xh100-bf16.json", "layers": 8,
                  "micro_batch": 6, "style": "mpt"},
    "mpt-13b-4l": {"workload": "validation/workloads/mpt-13b-seq2048-8xh100-bf16.json", "layers": 4,
                   "micro_batch": 2, "style": "mpt"},
    "llama3-8b-4l": {"workload": "workloads/llama-3-8b.json", "layers": 4, "micro_batch": 1,
                     "style": "llama"},
    # torchtitan's H200 float8 benchmark run's layer (validation case e2e/torchtitan-llama3.1-8b-32xh200-fp8),
    # 4 and 8 of its 32 layers (one layer's cost: (8 layers - 4 layers) / 4), local batch 2 x 8192, in
    # float8 and in bf16. SDPA as torch 2.8 (the run's) chose it: FlashAttention-2, cuDNN attention opt-in
    # since pytorch#138522; torch >= 2.10 with a bundled cuDNN > 9.15 prefers cuDNN on sm90 (sdp_utils.cpp
    # check_prefer_cudnn_attention), whose forward torchtitan's op policy at e7c0cae does not save: "-cudnn".
    **{"llama31-8b-%dl-%s%s" % (layers, "fp8" if fp8 else "bf16", "-cudnn" if cudnn else ""): {
        "workload": "validation/workloads/torchtitan-llama3.1-8b-32xh200-fp8.json", "layers": layers,
        "micro_batch": 2, "style": "llama", "separate": True, "recompute": "op", "compile": True, "fp8": fp8,
        "cudnn_sdpa": cudnn}
       for layers, fp8, cudnn in [(4, True, False), (4, False, False), (8, True, False), (8, False, False),
                                  (4, True, True)]},
}
DEFAULT_CASES = ["mpt-1b-plain", "mpt-1b", "mpt-7b-8l", "mpt-13b-4l", "llama3-8b-4l"]


def log(msg):
    print("train_step: " + msg, file=sys.stderr, flush=True)


def smi():
    fields = ["name", "driver_version", "memory.total", "power.limit", "clocks.max.sm", "clocks.sm",
              "power.draw", "temperature.gpu", "clocks_event_reasons.active"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    if not out:
        return {"error": "no output"}
    return dict(zip(fields, [p.strip() for p in out[0].split(",")]))


def model_config(repo, case):
    with open(os.path.join(repo, case["workload"])) as f:
        w = json.load(f)
    m, t = w["model"], w["training"]
    cfg = {
        "workload": case["workload"],
        "name": m["name"],
        "layers": case["layers"] if case["layers"] is not None else m["layers"],
        "hidden": m["hidden"],
        "heads": m["heads"],
        "kv_heads": m.get("kv_heads", m["heads"]),
        "ffn_hidden": m["ffn_hidden"],
        "gated_mlp": m["gated_mlp"],
        "vocab": m["vocab"],
        "sequence_length": t["sequence_length"],
        "micro_batch": case["micro_batch"],
        "style": case["style"],
    }
    # The keys of torchtitan's way of running a layer, recorded where a case sets them (the cases
    # before them ran without: tests/tools/test_train_step_compare.py compares configurations).
    for key in ("separate", "recompute", "compile", "fp8", "cudnn_sdpa"):
        if key in case:
            cfg[key] = case[key]
    return cfg


def build(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    style = cfg["style"]
    h, H, KV = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    d = h // H
    ffn, gated, V, S = cfg["ffn_hidden"], cfg["gated_mlp"], cfg["vocab"], cfg["sequence_length"]
    bias = style == "mpt"
    separate, compiled = cfg.get("separate", False), cfg.get("compile", False)

    def norm():
        if style == "llama":
            return nn.RMSNorm(h, eps=1e-5)
        return nn.LayerNorm(h, eps=1e-5, bias=bias)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = norm()
            if separate:
                self.wq = nn.Linear(h, H * d, bias=bias)
                self.wk = nn.Linear(h, KV * d, bias=bias)
                self.wv = nn.Linear(h, KV * d, bias=bias)
            else:
                self.qkv = nn.Linear(h, (H + 2 * KV) * d, bias=bias)
            self.proj = nn.Linear(H * d, h, bias=bias)
            self.n2 = norm()
            if separate:
                self.w1 = nn.Linear(h, ffn, bias=bias)
                self.w3 = nn.Linear(h, ffn, bias=bias)
            else:
                self.fc1 = nn.Linear(h, ffn * (2 if gated else 1), bias=bias)
            self.fc2 = nn.Linear(ffn, h, bias=bias)

        def forward(self, x, freqs):
            b, s, _ = x.shape
            if separate:
                y = self.n1(x)
                q, k, v = self.wq(y), self.wk(y), self.wv(y)
            else:
                q, k, v = self.qkv(self.n1(x)).split([H * d, KV * d, KV * d], dim=-1)
            q, k, v = q.view(b, s, H, d), k.view(b, s, KV, d), v.view(b, s, KV, d)
            if freqs is not None:
                # torchtitan's apply_rotary_emb: pairs as complex numbers in fp32, then back.
                qc = torch.view_as_complex(q.float().reshape(b, s, H, d // 2, 2))
                kc = torch.view_as_complex(k.float().reshape(b, s, KV, d // 2, 2))
                q = torch.view_as_real(qc * freqs).flatten(3).type_as(v)
                k = torch.view_as_real(kc * freqs).flatten(3).type_as(v)
            if KV < H:
                # torchtitan's repeat_kv: expand then materialize.
                k = k[:, :, :, None, :].expand(b, s, KV, H // KV, d).reshape(b, s, H, d)
                v = v[:, :, :, None, :].expand(b, s, KV, H // KV, d).reshape(b, s, H, d)
            if compiled:
                # torchtitan calls SDPA without a backend context; bf16 causal picks flash on Hopper.
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                   v.transpose(1, 2), is_causal=True)
            else:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                       v.transpose(1, 2), is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(b, s, H * d))
            if separate:
                y = self.n2(x)
                u = F.silu(self.w1(y)) * self.w3(y)
            elif gated:
                u = self.fc1(self.n2(x))
                a, g = u.chunk(2, dim=-1)
                u = F.silu(g) * a
            else:
                u = F.gelu(self.fc1(self.n2(x)))
            return x + self.fc2(u)

    def op_checkpoint(block):
        """torchtitan's selective_ac_option "op": _apply_ac_to_transformer_block at e7c0cae."""
        from collections import defaultdict
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
        save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
                torch.ops.aten._scaled_dot_product_flash_attention.default, torch.ops.aten.max.default}

        def context_fn():
            meta = defaultdict(int)

            def policy(ctx, func, *args, **kwargs):
                key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
                if func == torch.ops.aten.mm.default:
                    meta[key] += 1
                keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
                return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

            return create_selective_checkpoint_contexts(policy)

        return checkpoint_wrapper(block, context_fn=context_fn, preserve_rng_state=False)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, h)
            self.pos = nn.Embedding(S, h) if style == "mpt" else None
            blocks = [Block() for _ in range(cfg["layers"])]
            if cfg.get("recompute", "none") == "op":
                blocks = [op_checkpoint(blk) for blk in blocks]
            elif cfg.get("recompute", "none") != "none":
                raise ValueError("recompute %r: only none and op" % cfg["recompute"])
            self.blocks = nn.ModuleList(blocks)
            self.norm = norm()
            self.head = None if style == "mpt" else nn.Linear(h, V, bias=False)

        def forward(self, tokens, targets, freqs):
            x = self.emb(tokens)
            if self.pos is not None:
                x = x + self.pos.weight[: tokens.shape[1]]
            for blk in self.blocks:
                x = blk(x, freqs)
            x = self.norm(x)
            logits = F.linear(x, self.emb.weight) if self.head is None else self.head(x)
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    model = Model().to(torch.bfloat16)
    if cfg.get("fp8", False):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig(),
                                   module_filter_fn=lambda mod, fqn: fqn != "head")
    if compiled:
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk, fullgraph=True)
    return model


class Trainer:
    """Megatron's Float16OptimizerWithFloat16Params on one GPU, without loss scaling (bf16)."""

    def __init__(self, torch, model):
        self.torch = torch
        self.params = [p for p in model.parameters()]
        self.master = [p.detach().float().clone() for p in self.params]
        n = sum(p.numel() for p in self.params)
        self.main_grad = torch.zeros(n, dtype=torch.float32, device=self.params[0].device)
        off = 0
        for m in self.master:
            m.grad = self.main_grad[off: off + m.numel()].view_as(m)
            off += m.numel()
        self.opt = torch.optim.AdamW(self.master, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        self.numel = n

    def step(self, model, tokens, targets, freqs):
        torch = self.torch
        from torch.profiler import record_function
        for p in self.params:
            p.grad = None
        with record_function("forward"):
            loss = model(tokens, targets, freqs)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"), torch.no_grad():
            torch._foreach_copy_([m.grad for m in self.master], [p.grad for p in self.params])
            torch.nn.utils.clip_grad_norm_(self.master, max_norm=1.0, foreach=True)
            self.opt.step()
            torch._foreach_copy_(self.params, self.master)
        return loss


def kernel_table(trace_path):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        return None
    # The GPU side of each record_function range: first kernel start to last kernel end it launched.
    phases = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation":
            phases[e["name"]] = phases.get(e["name"], 0.0) + float(e.get("dur", 0.0))
    by_name = {}
    intervals = []
    for e in kernels:
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        row = by_name.setdefault(e["name"], {"cat": e["cat"], "count": 0, "total_us": 0.0})
        row["count"] += 1
        row["total_us"] += dur
        intervals.append((ts, ts + dur))
    intervals.sort()
    busy, end = 0.0, None
    for a, b in intervals:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    span = intervals[-1][1] - intervals[0][0] if intervals else 0.0
    names = sorted(by_name.items(), key=lambda kv: -kv[1]["total_us"])
    return {"kernels": len(kernels), "gpu_span_us": span, "gpu_busy_us": busy, "phases_gpu_us": phases,
            "by_name": [dict(name=k, **v) for k, v in names]}


def run_case(torch, repo, name, case, args, trace_dir):
    cfg = model_config(repo, case)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch._dynamo.reset()  # each case compiles its own blocks, whatever the SDPA backend before it
    torch.backends.cuda.enable_cudnn_sdp(cfg.get("cudnn_sdpa", True))
    while True:
        try:
            with dev:  # initialized on the GPU: a CPU init of billions of parameters takes minutes
                model = build(torch, cfg)
            model = model.to(dtype=torch.bfloat16)
            trainer = Trainer(torch, model)
            b, s = cfg["micro_batch"], cfg["sequence_length"]
            tokens = torch.randint(0, cfg["vocab"], (b, s), device=dev)
            targets = torch.randint(0, cfg["vocab"], (b, s), device=dev)
            freqs = None
            if cfg["style"] == "llama":
                d = cfg["hidden"] // cfg["heads"]
                inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev).float() / d))
                ang = torch.outer(torch.arange(s, device=dev).float(), inv)
                freqs = torch.polar(torch.ones_like(ang), ang).view(1, s, 1, d // 2)
            torch.cuda.reset_peak_memory_stats()
            for _ in range(args.warmup):
                trainer.step(model, tokens, targets, freqs)
            torch.cuda.synchronize()
            break
        except torch.cuda.OutOfMemoryError:
            model = trainer = None
            torch.cuda.empty_cache()
            if cfg["micro_batch"] == 1:
                raise
            cfg["micro_batch"] //= 2
            log("%s: out of memory, micro-batch %d" % (name, cfg["micro_batch"]))
    times = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.step(model, tokens, targets, freqs)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated()
    from torch.profiler import ProfilerActivity, profile
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            trainer.step(model, tokens, targets, freqs)
            torch.cuda.synchronize()
        prof.export_chrome_trace(raw)
        table = kernel_table(raw)
        if trace_dir is not None and name in args.trace_cases.split(","):
            os.makedirs(trace_dir, exist_ok=True)
            with open(raw, "rb") as src, gzip.open(os.path.join(trace_dir, name + ".trace.json.gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
    srt = sorted(times)
    result = {"config": cfg, "parameters": trainer.numel, "step_ms": times,
              "step_ms_median": srt[len(srt) // 2], "step_ms_min": srt[0],
              "peak_memory_bytes": peak, "profiled_step": table, "smi_after": smi()}
    del model, trainer
    torch.cuda.empty_cache()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="any of " + ",".join(CASES))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trace-dir", default=None, help="write the profiled step's Kineto trace here (gzip)")
    ap.add_argument("--trace-cases", default="mpt-1b-plain,llama3-8b-4l")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip the cases left once this is spent")
    args = ap.parse_args()
    import torch
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    props = torch.cuda.get_device_properties(0)
    doc = {
        "schema": "fusesim.train_step",
        "schema_version": 1,
        "provenance": {
            "kind": "measured",
            "tool": "tools/microbench/train_step.py",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "host": socket.gethostname(),
            "device": props.name,
            "multiprocessors": props.multi_processor_count,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "smi_before": smi(),
        },
        "method": "eager PyTorch, bf16 parameters and activations, fp32 main gradients and master weights, "
                  "clip_grad_norm_ (foreach), fused AdamW; %d warm-up steps, %d timed steps (synchronized), "
                  "then one step under torch.profiler" % (args.warmup, args.steps),
        "cases": {},
    }
    start = time.monotonic()
    for name in args.cases.split(","):
        if time.monotonic() - start > args.budget_s:
            log("budget spent: %s skipped" % name)
            continue
        t0 = time.monotonic()
        try:
            doc["cases"][name] = run_case(torch, repo, name, CASES[name], args, args.trace_dir)
            r = doc["cases"][name]
            log("%s: median step %.2f ms, busy %.1f%%, peak %.1f GB (%.0f s)" % (
                name, r["step_ms_median"], 100 * r["profiled_step"]["gpu_busy_us"] / r["profiled_step"]["gpu_span_us"],
                r["peak_memory_bytes"] / 1e9, time.monotonic() - t0))
        except Exception as e:  # one failing case must not lose the others' measurements
            doc["cases"][name] = {"error": "%s: %s" % (type(e).__name__, e)}
            log("%s failed: %s" % (name, doc["cases"][name]["error"]))
            torch.cuda.empty_cache()
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
