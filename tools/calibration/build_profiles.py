#!/usr/bin/env python3
"""Writes the kernel samples of the shipped profiles from the raw data under tools/calibration/raw/.

  tools/calibration/build_profiles.py           rewrite profiles/{h100,a100,h200}-sxm.json and
                                                profiles/alternatives/h100-sxm-cuda13.json
  tools/calibration/build_profiles.py --check   exit 1 if a shipped profile differs from what it would write

H100 and A100: the "gemm" samples that came from vidur and the "elementwise" samples are rewritten,
and on the H100 the sections this project measured with tools/microbench/microbench.py on a lent H100
(raw/microbench/) join them, but for its bf16 GEMMs, which only the alternative h100-sxm-cuda13 takes
(the software of 2026; docs/calibration.md, "Which software a profile prices"). H200: the kernel samples (gemm, attention, elementwise, copy,
stream_wait) that this project measured with microbench on a lent H200 are rewritten. On both, the
optimizer's, loss's and eager norms' kernels of whole training steps measured on that GPU join them. Every other key,
and samples entered by hand from other sources, stay as they are. fusesim fits its kernel
models on these samples when it loads the profile (docs/calibration.md, "Kernel models").
"""
import argparse
import csv
import difflib
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAW = os.path.join(ROOT, "tools", "calibration", "raw", "vidur")
# (the device whose raw data builds it, the file, whether the bf16 GEMMs this project timed with the
# libraries of 2026 join vidur's fp16 ones). vidur's H100 GEMMs (2024) take 1.15x the 2026 bursts'
# time on the median of the 20 shapes both timed (0.96-1.51x), and the published H100 runs ran the
# libraries of 2023-2024: the default profile prices the GEMMs of the runs it is validated on; the
# alternative, those of torch 2.11 and CUDA 13 (docs/calibration.md, "Which software a profile prices").
PROFILES = [("h100", "profiles/h100-sxm.json", False),
            ("h100", "profiles/alternatives/h100-sxm-cuda13.json", True),
            ("a100", "profiles/a100-sxm.json", False),
            ("h200", "profiles/h200-sxm.json", False)]
# Devices whose kernel samples come from this project's own microbench runs (file under raw/microbench/).
# Its contention sample is left out: the GEMM ran faster beside the copy (0.88x) because the pacing
# of the "beside" samples let the power-capped GPU raise its clock (docs/microbench.md, "Power").
MICROBENCH_RAW = os.path.join(ROOT, "tools", "calibration", "raw", "microbench")
# (file, the sections the profile takes from it). GEMMs come from runs with `--timing burst`: samples
# timed back to back for a whole budget hold a power-capped GPU at its sustained clock (1.17-1.22x the
# burst times on these GPUs: docs/microbench.md, "Power"), and fusesim applies the in-step rate
# (device.step_rate_fraction) on top of a burst. The H200's attention, norm and copy samples of
# 2026-11-26 were timed back to back; attention was measured again in bursts at 1k, 8k and 32k tokens
# (the -quick file, in no profile): back to back was 0.998-1.091x the burst, so those samples stay.
MEASURED = {"h200": [("h200-sxm-2026-11-26.json", ["attention", "elementwise", "copy", "stream_wait"]),
                     ("h200-sxm-2026-11-27-burst-gemm.json", ["gemm"])]}
# Sections this project measured on a vidur profile's device: bf16 GEMMs of training shapes (vidur's
# stop at 4,096 tokens) and fp8 GEMMs (vidur has none) join vidur's samples; FlashAttention forward and
# backward apart (the published figures are forward+backward, and PyTorch's FA2 backward runs at
# 0.71-0.85 of its forward rate: BENCHMARKS.md, "Kernel models"); the residual add (its 256 MiB and
# 1 GiB samples pass the floor below);
# copies, from which the loader fits the HBM streaming bandwidth. The LayerNorm samples stay out: they
# time PyTorch's eager LayerNorm (vidur's `layernorm_eager`), not the fused norm vidur timed.
MEASURED_EXTRA = {"h100": [("h100-sxm-2026-11-27-burst.json", ["gemm", "attention", "elementwise", "copy"])]}
MEASURED_SECTIONS = ["gemm", "attention", "elementwise", "copy", "stream_wait"]
MEASURED_EXTRA_ELEMENTWISE_OPS = {"add"}
# A burst sample is kept when its five repeats agree: the fourth fastest within 5% of the fastest
# (undisturbed bursts of one shape agree within 1-2%; a repeat that waited on the host, or on the VM's
# other tenants, only grows). On the H100 of 2026-11-27 the host queued launches more slowly than the
# smallest kernels ran (its 1024x4096x1024 fp8 GEMM read 31-33 us in every repeat, the same shape 10.8 us
# on the H200 of the same day; bf16 shapes under 40 us read 1.1-1.5x the H200's), so that run keeps its
# samples of 50 us and more; vidur's samples cover the small shapes on that device. The tool now queues
# a sleep long enough for the host to queue every timed launch (microbench.py, BURST_SLEEP_CYCLES_PER_LAUNCH).
BURST_AGREEMENT = 1.05
BURST_HOST_FLOOR_S = {"h100-sxm-2026-11-27-burst.json": 50e-6}
# Whole training steps this project measured on a profile's device (tools/microbench/train_step.py): the
# optimizer's multi-tensor kernels, which vidur (inference) and microbench.py never ran, join its samples. Each
# profiled step's kernels of one kind, summed, are one sample of `kernels` launches; the bytes are
# what the kernel moves per parameter (fp32 master weights, moments and gradients, bf16 weights).
MEASURED_STEPS = {"h100": "h100-sxm-2026-11-26-train-steps.json", "h200": "h200-sxm-2026-11-28-train-steps.json"}
# Kernel times published with their shapes (raw/published/): samples of a kernel no vidur file or
# microbench run of this project timed, each with its source and how the shape was read from it.
PUBLISHED_RAW = os.path.join(ROOT, "tools", "calibration", "raw", "published")
PUBLISHED = {"a100": ["a100-apex-fast-layer-norm.json", "a100-apex-fused-layer-norm.json"]}
STEP_KERNELS = [
    # (op, what the kernel name holds, bytes per parameter)
    ("adam", "FusedAdamMathFunctor<float", 28),        # master weight, m, v read and written; gradient read
    ("grad_norm", "LpNormFunctor<float", 4),            # the gradients read
    ("grad_scale", "BinaryOpScalarTensorFunctor<float, 1, 1, 0>, std::multiplies<float>", 8),  # read, written
    ("copy", "CopyFunctor<c10::BFloat16, float, 2, 1, 1>", 6),  # fp32 master read, bf16 weight written
]
# The norms of the measured steps whose model runs PyTorch's native LayerNorm (llm-foundry's MPT, style
# "mpt" and "plain"; the "llama" style's RMSNorm is another kernel): (op, what the kernel names hold,
# bytes per element of the norm's [rows, hidden] input). A backward is the input gradient's kernel and
# the gamma/beta gradients' kernel, one sample launch per norm; the fused norm's bytes (x, dy, dx). The
# forward (vectorized_layer_norm_kernel) is not taken: the steps time it at 1.9-2.1 TB/s, as vidur's
# phi-2 samples of the same kernel do at 4,096 rows (2.0 TB/s), and four wide samples beside them would
# carry the op's fit alone, launch floor and all, when phi-2 is held out (leave-one-model-out).
STEP_NORMS = [
    ("layernorm_eager_bwd", ["layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float, false>",
                             "GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float"], 6),
]
STEP_NORM_STYLES = ("mpt", "plain")
# The loss of the measured steps whose model is llm-foundry's MPT (styles "mpt" and "plain"): PyTorch's
# F.cross_entropy on the logits cast to fp32, the op fusesim emits as "cross_entropy" and
# "cross_entropy_bwd" (sched/step.cpp, model::cross_entropy_forward_bytes): (op, what the kernel names
# hold, bytes per logit). Forward: the cast (direct_copy, 2 + 4 B) and log_softmax (4 + 4 B);
# backward: the NLL gradient's fill (4 B), log_softmax's backward (12 B) and the cast back (4 + 2 B).
# In those steps these are the only casts and float fills of any size (the "llama" style's rotary
# embedding casts too, eager: left out); a tensor of more than 2^31 bytes runs each elementwise op as
# two launches or more (TensorIterator's 32-bit indexing), which the launch counts carry, and the float
# fills include two of a few elements (the loss gradient's ones_like, the optimizer's norm buffer).
# A "llama" step compiled per block (torchtitan's torch.compile) leaves the loss the only eager cast:
# Inductor fuses the model's casts into its own kernels (triton_*), so those steps' loss is taken too.
STEP_LOSS = [
    ("cross_entropy", ["cunn_SoftMaxForward<4, float, float, float", "direct_copy_kernel_cuda"], 14),
    ("cross_entropy_bwd", ["cunn_SoftMaxBackward<4, float, float, float", "bfloat16_copy_kernel_cuda",
                           "FillFunctor<float>"], 22),
]
# microbench.py's layernorm sample normalises rows of this width (TorchBackend.elementwise).
MICROBENCH_NORM_HIDDEN = 4096
# Copies of a few MiB stay in a Hopper's 50-60 MB L2 and time the launch and the L2 (the H200's 16 MiB
# copy moved 5 TB/s, above its 4.8 TB/s HBM): the profile keeps the copies that stream through HBM,
# from which the loader fits the streaming bandwidth (fitted.hbm_bytes_per_s).
MICROBENCH_MIN_COPY_BYTES = 64 << 20
VIDUR = "microsoft/vidur (MIT)"
ORG = {"Llama-2-7b-hf": "meta-llama", "Llama-2-70b-hf": "meta-llama", "Meta-Llama-3-8B": "meta-llama",
       "Meta-Llama-3-70B": "meta-llama", "internlm-20b": "internlm", "phi-2": "microsoft"}
GEMMS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]
# vidur times each kernel with PyTorch's profiler, which reports whole microseconds cut down from
# nanoseconds (KinetoEvent::durationUs, torch/csrc/autograd/profiler_kineto.cpp): every sample says so,
# and fusesim fits the time whose reading matches (docs/calibration.md, "Timer resolution").
TIMER_RESOLUTION_S = 1e-6


def seconds(ms_text):
    # vidur's times carry at most 7 significant digits (microsecond timer, medians of two halves) plus
    # pandas' float noise at the 17th (0.17350000000000002): 12 digits keep every real one and drop the
    # noise, so that json writes the shortest repr (0.0001735).
    return float(f"{float(ms_text) * 1e-3:.12g}")


def exact(num, den, what):
    if num % den:
        raise SystemExit(f"{what}: {num} is not divisible by tp {den}")
    return num // den


def samples(device):
    commit = open(os.path.join(RAW, "COMMIT")).read().strip()[:12]
    gemm, small = [], []
    for path in sorted(glob.glob(os.path.join(RAW, device, "*.csv"))):
        model = os.path.basename(path)[:-4]
        original = f"data/profiling/compute/{device}/{ORG[model]}/{model}/mlp.csv"
        groups = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                groups.setdefault((int(r["tp"]), int(r["num_tokens"])), []).append(r)
        for (tp, T), rows in sorted(groups.items()):
            r0 = rows[0]
            H, nq, nkv, F = (int(r0[k]) for k in ("n_embd", "n_head", "n_kv_head", "n_expanded_embd"))
            gated = r0["use_gated_mlp"] == "True"
            post_norm = "post_attention_layernorm_median_ms" in r0
            hd = exact(H, nq, f"{path}: n_embd / n_head")
            where = f"vidur@{commit} {original} rows {','.join(r['vidur_row'] for r in rows)}"

            def times(col):
                return sorted(seconds(r[f"{col}_median_ms"]) for r in rows)

            # GEMM (n, k) per op on one tensor-parallel rank (m = tokens): QKV and the MLP up (gate and up
            # when gated) are column-parallel, the output projection and the MLP down row-parallel.
            heads, kv_heads, ffn = (exact(x, tp, f"{path}: {name}") for x, name in
                                    ((nq, "n_head"), (nkv, "n_kv_head"), (F, "n_expanded_embd")))
            shapes = {"attn_pre_proj": ((heads + 2 * kv_heads) * hd, H), "attn_post_proj": (H, heads * hd),
                      "mlp_up_proj": ((2 if gated else 1) * ffn, H), "mlp_down_proj": (H, ffn)}
            for op in GEMMS:
                n, k = shapes[op]
                gemm.append({"dtype": "fp16", "m": T, "n": n, "k": k, "batch": 1, "time_s": times(op),
                             "resolution_s": TIMER_RESOLUTION_S, "group": model, "source": f"{where}: {op}, tp {tp}"})
            # HBM traffic in fp16 (2 bytes): norms read and write T x H; rotary reads and writes q and k;
            # SwiGLU reads gate and up and writes one, GeLU reads and writes one; the residual add reads two
            # and writes one; the embedding gathers T rows. How vidur runs them (vidur/profiling/mlp/
            # mlp_impl.py, GPTBlock): a model with a post-attention norm (every one here but phi-2) uses
            # sarathi's fused RMSNorm; phi-2 (norm: layer_norm, no post-attention norm) runs PyTorch's eager
            # torch.nn.LayerNorm, another kernel (op layernorm_eager, emitted by no schedule), and its
            # residual `attn + mlp + residual` as two eager adds in one timed region (kernels: 2).
            norm = "layernorm" if post_norm else "layernorm_eager"
            elems = [("emb", "embedding", 2 * T * H, 1), ("input_layernorm", norm, 2 * T * H, 1),
                     ("attn_rope", "rope", 2 * T * (heads + kv_heads) * hd, 1),
                     ("mlp_act", "swiglu" if gated else "gelu", (3 if gated else 2) * T * ffn, 1),
                     ("add", "add", (1 if post_norm else 2) * 3 * T * H, 1 if post_norm else 2)]
            if post_norm:
                elems.insert(2, ("post_attention_layernorm", "layernorm", 2 * T * H, 1))
            for col, op, n_elems, kernels in elems:
                sample = {"op": op, "bytes": 2 * n_elems, "rows": T}
                if kernels > 1:
                    sample["kernels"] = kernels
                small.append(sample | {"time_s": times(col), "resolution_s": TIMER_RESOLUTION_S, "group": model,
                                       "source": f"{where}: {col}, tp {tp}"})
    return gemm, small


def microbench_raw(name):
    """A committed output of this project's tools under raw/microbench/."""
    with open(os.path.join(MICROBENCH_RAW, name)) as f:
        return json.load(f)


def steady_burst(times, floor_s):
    t = sorted(times)
    return len(t) >= 4 and t[3] <= BURST_AGREEMENT * t[0] and t[len(t) // 2] >= floor_s


def measured_samples(device, name, sections=MEASURED_SECTIONS):
    """The kernel sections of a microbench run, each sample naming the file and its index in it."""
    raw = microbench_raw(name)
    prov = raw["provenance"]
    timing = f", {prov['timing']} timing" if "timing" in prov else ""
    where = (f"measured by this project: tools/microbench/microbench.py on one {raw['device']['name']} (machine "
             f"'{prov['machine']}', driver {prov['driver']}, torch {prov['libraries']['torch']}{timing}), "
             f"{prov['date']}; tools/calibration/raw/microbench/{name}")
    out = {}
    for section in sections:
        if section not in raw:
            raise SystemExit(f"{name}: no section {section!r}")
        if section == "stream_wait":
            chains = {k: [float(f"{t:.6g}") for t in v] if isinstance(v, list) else v for k, v in raw[section].items()}
            out[section] = chains | {"source": f"{where} stream_wait"}
            continue
        rows = []
        for i, sample in enumerate(raw[section]):
            if section == "copy" and sample["bytes"] < MICROBENCH_MIN_COPY_BYTES:
                continue
            if prov.get("timing") == "burst" and not steady_burst(sample["time_s"], BURST_HOST_FLOOR_S.get(name, 0.0)):
                continue
            sample = dict(sample)
            # CUDA events resolve about half a microsecond: 6 significant digits keep every real one.
            sample["time_s"] = [float(f"{t:.6g}") for t in sample["time_s"]]
            if section == "gemm":
                sample["group"] = f"microbench-{device}" + ("-fp8" if sample["dtype"] == "fp8" else "")
            if section == "elementwise" and sample["op"] == "layernorm":
                sample["rows"] = sample["bytes"] // (4 * MICROBENCH_NORM_HIDDEN)
            rows.append(sample | {"source": f"{where} {section}[{i}]"})
        out[section] = rows
    return out


def step_samples(device):
    """The optimizer kernels, eager norms' backward and loss of the whole steps measured on `device`,
    one sample per case and op."""
    if device not in MEASURED_STEPS:
        return []
    name = MEASURED_STEPS[device]
    raw = microbench_raw(name)
    prov = raw["provenance"]
    where = (f"measured by this project: tools/microbench/train_step.py on one {prov['device']} (torch "
             f"{prov['torch']}, driver {prov['smi_before']['driver_version']}), {prov['date']}, in a profiled "
             f"training step; tools/calibration/raw/microbench/{name}")
    out = []
    for case, result in raw["cases"].items():
        if "error" in result:
            continue

        def kernel(marker):
            """The step's one kernel (all its launches, summed) whose name holds `marker`."""
            found = [r for r in result["profiled_step"]["by_name"] if marker in r["name"]]
            if len(found) != 1:
                raise SystemExit(f"{name}: case {case}: {len(found)} kernels match {marker!r}, want 1")
            return found[0]

        def sample(op, byte_count, launches, total_us, what, **extra):
            return {"op": op, "bytes": byte_count, **extra, "kernels": launches,
                    "time_s": [float(f"{total_us * 1e-6:.6g}")], "group": f"train-step-{case}",
                    "source": f"{where} cases.{case}: {what}"}

        for op, marker, per_param in STEP_KERNELS:
            r = kernel(marker)
            out.append(sample(op, per_param * result["parameters"], r["count"], r["total_us"],
                              f"{r['count']} launches of {marker}"))
        cfg = result["config"]
        eager_norms = cfg["style"] in STEP_NORM_STYLES
        if not eager_norms and not cfg.get("compile", False):
            continue
        # The micro-batch's token rows: the logits' rows, and the rows every norm normalises.
        rows = cfg["sequence_length"] * cfg["micro_batch"]
        for op, markers, per_logit in STEP_LOSS:
            found = [kernel(marker) for marker in markers]
            launches = sum(r["count"] for r in found)
            out.append(sample(op, per_logit * rows * cfg["vocab"], launches, sum(r["total_us"] for r in found),
                              f"the loss over [{rows}, {cfg['vocab']}] logits, {launches} launches of "
                              f"{' + '.join(markers)}", rows=rows))
        if not eager_norms:
            continue
        # Every norm of the step (two per layer, the final one).
        norms = 2 * cfg["layers"] + 1
        for op, markers, per_element in STEP_NORMS:
            found = [kernel(marker) for marker in markers]
            for marker, r in zip(markers, found):
                if r["count"] != norms:
                    raise SystemExit(f"{name}: case {case}: want one kernel matching {marker!r} launched {norms} times")
            out.append(sample(op, per_element * norms * rows * cfg["hidden"], norms, sum(r["total_us"] for r in found),
                              f"{norms} norms of [{rows}, {cfg['hidden']}] bf16, each {' + '.join(markers)}",
                              rows=rows))
    return out


def published_samples(device):
    out = []
    for name in PUBLISHED.get(device, []):
        with open(os.path.join(PUBLISHED_RAW, name)) as f:
            raw = json.load(f)
        if raw.get("device") != device:
            raise SystemExit(f"{name}: device {raw.get('device')!r}, want {device!r}")
        for row in raw["samples"]:
            out.append(row | {"group": name.removesuffix(".json"),
                              "source": f"{raw['source']}; tools/calibration/raw/published/{name}"})
    return out


def render(doc):
    lines = ["{"]
    keys = list(doc)
    for i, key in enumerate(keys):
        value = doc[key]
        comma = "," if i + 1 < len(keys) else ""
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            lines += [f"    {json.dumps(v)}{',' if j + 1 < len(value) else ''}" for j, v in enumerate(value)]
            lines.append(f"  ]{comma}")
        else:
            body = json.dumps(value, indent=2).replace("\n", "\n  ")
            lines.append(f"  {json.dumps(key)}: {body}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def without_measured(rows):
    """The samples a build keeps: those that did not come from this project's microbench runs or
    measured training steps."""
    return [x for x in rows if not any(tool in x.get("source", "") for tool in
                                       ("tools/microbench/microbench.py", "tools/microbench/train_step.py"))]


def build_measured(device, doc):
    measured = {}
    for name, sections in MEASURED[device]:
        for section, rows in measured_samples(device, name, sections).items():
            measured[section] = rows if section == "stream_wait" else measured.get(section, []) + rows
    out = dict(doc)
    for section, rows in measured.items():
        if section == "stream_wait":
            out[section] = rows
            continue
        out[section] = without_measured(doc.get(section, [])) + rows
    out["elementwise"] = out.get("elementwise", []) + step_samples(device)
    return out


def measured_extra(device):
    """The sections measured by this project on a vidur profile's device, by section."""
    out = {}
    for name, sections in MEASURED_EXTRA.get(device, []):
        for section, rows in measured_samples(device, name, sections).items():
            if section == "elementwise":
                rows = [r | {"group": f"microbench-{device}"} for r in rows if r["op"] in MEASURED_EXTRA_ELEMENTWISE_OPS]
            out[section] = out.get(section, []) + rows
    return out


def build_vidur(device, doc, todays_gemms):
    gemm, small = samples(device)
    kept = [g for g in without_measured(doc.get("gemm", [])) if not g.get("source", "").startswith("vidur@")]
    out = {}
    for key in doc:
        out[key] = doc[key]
        if key == "provenance" and VIDUR not in doc["provenance"].get("source", ""):
            out[key] = dict(doc[key])
            out[key]["source"] = (doc[key].get("source", "") + "; kernel samples: " + VIDUR +
                                  " data/profiling, converted by tools/calibration/build_profiles.py")
    extra = measured_extra(device)
    measured_gemm = [g for g in extra.get("gemm", []) if todays_gemms or g["dtype"] != "bf16"]
    out["gemm"] = kept + gemm + measured_gemm
    out["elementwise"] = small + step_samples(device) + extra.get("elementwise", []) + published_samples(device)
    for section in ("attention", "copy"):
        if section in extra:
            out[section] = without_measured(doc.get(section, [])) + extra[section]
    return out


def build(device, current, todays_gemms):
    doc = json.loads(current)
    out = build_measured(device, doc) if device in MEASURED else build_vidur(device, doc, todays_gemms)
    # Keep the schema's order: samples before "fitted".
    order = ["schema", "schema_version", "device", "provenance", "gemm", "attention", "elementwise", "copy",
             "contention", "collectives", "stream_wait", "fitted"]
    return render({k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order})


def summary(rel, current, text):
    """What differs between the shipped profile and the regenerated one, in a few lines."""
    out = [f"{rel} differs from what build_profiles.py writes:"]
    try:
        old, new = json.loads(current), json.loads(text)
    except ValueError as e:
        old, new = {}, {}
        out.append(f"  shipped file does not parse: {e}")
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            sa, sb = [json.dumps(x) for x in a], [json.dumps(x) for x in b]
            gone, added = len(set(sa) - set(sb)), len(set(sb) - set(sa))
            out.append(f"  {key}: {len(a)} shipped, {len(b)} regenerated; {gone} only shipped, {added} only "
                       f"regenerated" + ("; order differs" if not gone and not added else ""))
        else:
            out.append(f"  {key}: value differs")
    lines = list(difflib.unified_diff(current.splitlines(), text.splitlines(), "shipped", "regenerated", n=0,
                                      lineterm=""))
    changed = [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    out.append(f"  {len(changed)} differing lines; first ones:")
    out += ["    " + (line if len(line) <= 160 else line[:157] + "...") for line in changed[:6]]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with a summary if a shipped profile differs")
    args = ap.parse_args()
    differs = []
    for device, rel, todays_gemms in PROFILES:
        path = os.path.join(ROOT, rel)
        with open(path) as f:
            current = f.read()
        text = build(device, current, todays_gemms)
        if text == current:
            continue
        if args.check:
            differs.append(summary(rel, current, text))
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {rel}")
    if differs:
        print("\n".join(differs), file=sys.stderr)
        print("run tools/calibration/build_profiles.py and commit the profiles", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
