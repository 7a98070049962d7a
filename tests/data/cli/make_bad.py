#!/usr/bin/env python3
"""Regenerates tests/data/cli/bad/: one defect each, applied to the shipped topologies/dgx-h100.json and
workloads/llama-3-70b.json. tests/cli/test_cli.cpp names the file and JSON path each must be reported at.
Run from anywhere: python3 tests/data/cli/make_bad.py"""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT = os.path.join(HERE, "bad")

topo_text = open(os.path.join(ROOT, "topologies", "dgx-h100.json")).read()
work_text = open(os.path.join(ROOT, "workloads", "llama-3-70b.json")).read()
topo = json.loads(topo_text)
work = json.loads(work_text)


def write(name, doc):
    with open(os.path.join(OUT, name), "w") as f:
        if isinstance(doc, str):
            f.write(doc)
        else:
            json.dump(doc, f, indent=2)
            f.write("\n")


def topo_variant(name, change):
    d = copy.deepcopy(topo)
    change(d)
    write(name, d)


def work_variant(name, change):
    d = copy.deepcopy(work)
    change(d)
    write(name, d)


os.makedirs(OUT, exist_ok=True)

# --- topology defects ---
# The comma after "name" removed: a JSON syntax error.
write("topo-syntax-error.json", topo_text.replace('"name": "dgx-h100",', '"name": "dgx-h100"', 1))
write("topo-empty.json", "")
write("topo-not-an-object.json", "[1, 2, 3]\n")
topo_variant("topo-missing-devices-per-node.json", lambda d: d["node"].pop("devices_per_node"))
topo_variant("topo-unknown-key.json", lambda d: d["node"]["scale_up"]["link"].update({"bandwith": 1}))
topo_variant("topo-wrong-type.json", lambda d: d["node"].update({"devices_per_node": "eight"}))
topo_variant("topo-negative-bandwidth.json",
             lambda d: d["node"]["scale_up"]["link"]["line_rate_bytes_per_s"].update({"value": -450e9}))
topo_variant("topo-number-without-source.json",
             lambda d: d["device_models"]["h100-sxm"]["peak_flops_per_s"].update({"bf16": 989e12}))
topo_variant("topo-source-missing.json",
             lambda d: d["communication"]["sm_step_latency_s"].pop("source"))
topo_variant("topo-unknown-device-model.json", lambda d: d["node"].update({"device_model": "h100-pcie"}))

# --- workload defects ---
write("work-syntax-error.json", work_text.replace('"layers": 80,', '"layers": 80,,', 1))
# Found by fuzzing: nlohmann reports a number beyond a double as out_of_range, not as a syntax error.
write("work-number-overflow.json", work_text.replace('"layers": 80,', '"layers": 1e400,', 1))
# nlohmann keeps the last of two equal keys: a duplicate must be refused, not silently win.
write("topo-duplicate-key.json", topo_text.replace('"name": "dgx-h100",', '"name": "dgx-h100", "name": "dgx-h200",', 1))
write("work-empty.json", "")
work_variant("work-missing-hidden.json", lambda d: d["model"].pop("hidden"))
work_variant("work-unknown-key.json", lambda d: d["training"].update({"seq_len": 4096}))
work_variant("work-wrong-type.json", lambda d: d["model"].update({"layers": "80"}))
work_variant("work-fractional-layers.json", lambda d: d["model"].update({"layers": 80.5}))
work_variant("work-absurd-sequence.json", lambda d: d["training"].update({"sequence_length": 1000000000000}))
work_variant("work-negative-micro-batch.json", lambda d: d["training"].update({"micro_batch": -1}))
work_variant("work-bad-dtype.json", lambda d: d["training"].update({"dtype": "bf17"}))
work_variant("work-bad-schedule-kind.json", lambda d: d["schedule"].update({"kind": "fused"}))
# heads 64 is not divisible by tp 6.
work_variant("work-tp-not-dividing-heads.json", lambda d: d["parallel"].update({"tp": 6}))
# tp 16 divides heads 64 and is a multiple of kv_heads 8, but a DGX H100 node has 8 GPUs.
work_variant("work-tp-larger-than-node.json", lambda d: d["parallel"].update({"tp": 16}))
# tp 8 x dp 2 = 16 ranks on an 8-GPU DGX H100.
work_variant("work-world-too-large.json", lambda d: d["parallel"].update({"dp": 2}))
