#!/usr/bin/env python3
"""Extracts the rows fusesim fits on from microsoft/vidur's profiling data (MIT licence) into small
CSVs under tools/calibration/raw/vidur/. Deterministic: the same vidur commit gives the same files.

  tools/calibration/extract_vidur.py --vidur-repo PATH_TO_VIDUR_GIT_DIR

Qwen-72B and CodeLlama-34B are never read: they are reserved for an independent check of how the
model predicts shapes it was not fitted on.
"""
import argparse
import csv
import io
import os
import subprocess
import sys

COMPUTE = {
    "h100": ["internlm/internlm-20b", "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-hf", "microsoft/phi-2"],
    "a100": ["internlm/internlm-20b", "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-hf",
             "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-8B", "microsoft/phi-2"],
}
NETWORK = ["h100_dgx", "a100_dgx"]
# Token counts kept: powers of two and their 1.5x between, up to vidur's largest; dense enough that
# every shape has measured neighbours, small enough to ship.
TOKENS = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
          8192, 12288, 16384, 24576, 32768}
SHAPE = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp"]
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw", "vidur")


def show(repo, path):
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout


def write(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vidur-repo", required=True)
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", args.vidur_repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    for device, models in COMPUTE.items():
        for model in models:
            path = f"data/profiling/compute/{device}/{model}/mlp.csv"
            reader = csv.DictReader(io.StringIO(show(args.vidur_repo, path)))
            ops = [op for op in OPS if f"time_stats.{op}.median" in reader.fieldnames]
            rows = []
            for i, r in enumerate(reader):
                if int(r["num_tokens"]) not in TOKENS:
                    continue
                rows.append([i, r["num_tokens"], r["num_tensor_parallel_workers"]] + [r[k] for k in SHAPE] +
                            [r[f"time_stats.{op}.median"] for op in ops])
            write(os.path.join(OUT, device, model.split("/")[1] + ".csv"),
                  ["vidur_row", "num_tokens", "tp"] + SHAPE + [f"{op}_median_ms" for op in ops], rows)
    for net in NETWORK:
        for op in ["all_reduce", "send_recv"]:
            reader = csv.DictReader(io.StringIO(show(args.vidur_repo, f"data/profiling/network/{net}/{op}.csv")))
            rows = [[r[""], r["size"], r["num_workers"], r["devices_per_node"], r[f"time_stats.{op}.median"]]
                    for r in reader if r["rank"] == "0"]
            write(os.path.join(OUT, "network", f"{net}_{op}.csv"),
                  ["vidur_row", "size_bytes", "num_workers", "devices_per_node", "median_ms"], rows)
    with open(os.path.join(OUT, "COMMIT"), "w") as f:
        f.write(commit + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
