#!/usr/bin/env python3
"""Extracts the rows fusesim fits on from microsoft/vidur's profiling data (MIT licence) into small
CSVs under tools/calibration/raw/vidur/, with the licence, the commit and a README.

  tools/calibration/extract_vidur.py --vidur-repo PATH_TO_VIDUR_GIT_DIR [--out DIR]

Reads only `git show HEAD:<path>` of the allowed files below; deterministic: the same vidur commit
gives byte-identical files. Qwen-72B and CodeLlama-34B are never read: they are reserved for an
independent check of how the kernel models predict shapes they were not fitted on.
Python 3 standard library only.
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import textwrap

URL = "https://github.com/microsoft/vidur"
COMPUTE = {
    "h100": ["internlm/internlm-20b", "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-hf", "microsoft/phi-2"],
    "a100": ["internlm/internlm-20b", "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-hf",
             "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-8B", "microsoft/phi-2"],
}
RESERVED = ("qwen", "codellama")  # never read, on any device
NETWORK = ["h100_dgx", "a100_dgx"]
NET_OPS = ["all_reduce", "send_recv"]
# Token counts kept: powers of two and their 1.5x between, up to vidur's largest; dense enough that
# every shape has measured neighbours, small enough to ship.
TOKENS = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
          8192, 12288, 16384, 24576, 32768}
SHAPE = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp"]
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw", "vidur")


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def show(repo, path):
    assert not any(r in path.lower() for r in RESERVED), path
    return git(repo, "show", f"HEAD:{path}")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(text)


def csv_text(header, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def compute_file(repo, device, model):
    path = f"data/profiling/compute/{device}/{model}/mlp.csv"
    reader = csv.DictReader(io.StringIO(show(repo, path)))
    ops = [op for op in OPS if f"time_stats.{op}.median" in reader.fieldnames]
    rows, shapes, total = [], set(), 0
    for i, r in enumerate(reader):
        total += 1
        shapes.add(tuple(r[k] for k in SHAPE))
        if int(r["num_tokens"]) not in TOKENS:
            continue
        rows.append([i, r["num_tokens"], r["num_tensor_parallel_workers"]] + [r[k] for k in SHAPE] +
                    [r[f"time_stats.{op}.median"] for op in ops])
    if len(shapes) != 1:
        raise SystemExit(f"{path}: the model's shape columns vary between rows: {sorted(shapes)}")
    text = csv_text(["vidur_row", "num_tokens", "tp"] + SHAPE + [f"{op}_median_ms" for op in ops], rows)
    return path, text, total, len(rows)


def network_file(repo, net, op):
    path = f"data/profiling/network/{net}/{op}.csv"
    reader = csv.DictReader(io.StringIO(show(repo, path)))
    rows, total = [], 0
    for i, r in enumerate(reader):
        total += 1
        if r.get("", str(i)) != str(i):  # vidur's unnamed pandas index column is the data row index
            raise SystemExit(f"{path}: row {i} has index {r['']}")
        if r["rank"] == "0":
            rows.append([i, r["size"], r["num_workers"], r["devices_per_node"], r[f"time_stats.{op}.median"]])
    text = csv_text(["vidur_row", "size_bytes", "num_workers", "devices_per_node", "median_ms"], rows)
    return path, text, total, len(rows)


def readme(commit, date, licence, compute, network):
    def table(entries):
        return "\n".join(f"| `{out}` | `{src}` | {total} | {kept} |" for out, src, total, kept in entries)

    copyright_line = next(line for line in licence.splitlines() if line.startswith("Copyright"))
    return f"""# Raw kernel and collective timings from microsoft/vidur

Written by `tools/calibration/extract_vidur.py --vidur-repo PATH` (deterministic; do not edit by hand).

Source: {URL} at commit `{commit}`
({date}; also in `COMMIT`), directory `data/profiling/`. Measured by vidur's profiler
(`vidur/profiling/mlp`, `vidur/profiling/collectives`) with CUDA timers on real A100 and H100 GPUs
(DGX machines), fp16. Times are milliseconds, copied verbatim (vidur writes
them through pandas, so some carry float noise such as `0.17350000000000002`).

## Licence

The data is vidur's, under the MIT licence ({copyright_line}). The full text, also in
`LICENSE` beside this file:

```
{licence.rstrip()}
```

## What is kept, and why

Compute (`<device>/<model>.csv` from `compute/<device>/<org>/<model>/mlp.csv`): the rows whose
`num_tokens` is a power of two or 1.5 times one (1 ... 32768), enough for every shape to have measured
neighbours while keeping the files small. Columns: `vidur_row` (0-based data row of the original
file, for provenance), `num_tokens`, `tp` (`num_tensor_parallel_workers`), the model's shape columns,
then the median time in ms of each op the file has (`emb`, `input_layernorm`, `attn_pre_proj` = QKV
projection, `attn_rope`, `attn_post_proj` = output projection, `post_attention_layernorm` (not in
phi-2), `mlp_up_proj`, `mlp_act`, `mlp_down_proj`, `add`). min, max, mean and std are dropped. vidur
repeats some (num_tokens, tp) rows (2048 and 4096 tokens, and on Llama-3 also 8192 to 32768: a second
sweep); all repeats are kept, and each profile sample lists every repeat's median. On H100 the
repeats of a GEMM differ by up to 19% (e.g. Llama-2-70B, tp 1, 2048 tokens, attn_pre_proj), on A100
by at most 5%.
Llama-3-8B and Llama-3-70B exist for A100 only (vidur has no H100 file for them).

| file | original | rows | kept |
|---|---|---|---|
{table(compute)}

Network (`network/<machine>_<op>.csv` from `network/<machine>/<op>.csv`): the rows of rank 0 (all
rows, in this commit), with `vidur_row`, `size_bytes` (vidur's `size`, the buffer in bytes),
`num_workers`, `devices_per_node` and `median_ms` (vidur's median, verbatim); min, max, mean, std and
the constant columns are dropped. Each (size, workers, devices per node) is measured once, except
16 MiB, which appears twice in every file (both kept). `tools/calibration/fit_collectives.py` fits
the topologies' NCCL protocol constants on the single-node all-reduce curves.

| file | original | rows | kept |
|---|---|---|---|
{table(network)}

`tools/calibration/build_profiles.py` turns the compute rows into the `gemm` and `elementwise`
samples of `profiles/h100-sxm.json` and `profiles/a100-sxm.json` (shapes and HBM bytes per op are
derived there; each sample names its original file and rows); `build_profiles.py --check`
(tests/tools/test_build_profiles.sh) finds the shipped profiles unchanged.

## Deliberately absent

vidur's Qwen-72B and CodeLlama-34B files, on every device, are neither read nor copied: they are
reserved for an independent validation of how fusesim predicts models it was not fitted on.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vidur-repo", required=True, help="git directory of a microsoft/vidur clone")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    args = ap.parse_args()
    commit = git(args.vidur_repo, "rev-parse", "HEAD").strip()
    date = git(args.vidur_repo, "log", "-1", "--format=%cs", "HEAD").strip()
    compute, network = [], []
    for device, models in COMPUTE.items():
        for model in models:
            src, text, total, kept = compute_file(args.vidur_repo, device, model)
            out = f"{device}/{model.split('/')[1]}.csv"
            write(os.path.join(args.out, out), text)
            compute.append((out, src, total, kept))
    for net in NETWORK:
        for op in NET_OPS:
            src, text, total, kept = network_file(args.vidur_repo, net, op)
            out = f"network/{net}_{op}.csv"
            write(os.path.join(args.out, out), text)
            network.append((out, src, total, kept))
    licence = textwrap.dedent(show(args.vidur_repo, "LICENSE"))
    write(os.path.join(args.out, "LICENSE"), licence)
    write(os.path.join(args.out, "COMMIT"), commit + "\n")
    write(os.path.join(args.out, "README.md"), readme(commit, date, licence, compute, network))
    return 0


if __name__ == "__main__":
    sys.exit(main())
