#!/usr/bin/env python3
"""Writes the kernel samples of the shipped profiles from the raw data under tools/calibration/raw/.

  tools/calibration/build_profiles.py           rewrite profiles/h100-sxm.json and profiles/a100-sxm.json
  tools/calibration/build_profiles.py --check   exit 1 if a shipped profile differs from what it would write

Only the "gemm" samples that came from vidur and the "elementwise" samples are rewritten; every other
key, and GEMM samples entered by hand from other sources, stay as they are. fusesim fits its kernel
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
PROFILES = {"h100": "profiles/h100-sxm.json", "a100": "profiles/a100-sxm.json"}
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


def build(device, current):
    doc = json.loads(current)
    gemm, small = samples(device)
    kept = [g for g in doc.get("gemm", []) if not g.get("source", "").startswith("vidur@")]
    out = {}
    for key in doc:
        out[key] = doc[key]
        if key == "provenance" and VIDUR not in doc["provenance"].get("source", ""):
            out[key] = dict(doc[key])
            out[key]["source"] = (doc[key].get("source", "") + "; kernel samples: " + VIDUR +
                                  " data/profiling, converted by tools/calibration/build_profiles.py")
    out["gemm"] = kept + gemm
    out["elementwise"] = small
    # Keep the schema's order: samples before "fitted".
    order = ["schema", "schema_version", "device", "provenance", "gemm", "attention", "elementwise", "copy",
             "contention", "collectives", "fitted"]
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
    for device, rel in PROFILES.items():
        path = os.path.join(ROOT, rel)
        with open(path) as f:
            current = f.read()
        text = build(device, current)
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
