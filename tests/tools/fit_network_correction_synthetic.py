"""Writes nccl-tests logs across nodes whose times are the shipped dgx-h100-4node's model of NCCL with a
known measured correction (1.7x the shipped extra latency a hop, other peak, centre and width, and a
tree's own extra latency, which the 2- and 4-node trees tell from the hops'), for
tests/tools/test_fit_network_correction.sh to import with `fusesim calibrate import-nccl-tests` and fit
back. Usage: fit_network_correction_synthetic.py OUT_DIR (writes ar2.log, ar4.log, ag4.log)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "calibration"))
import json  # noqa: E402

import fit_network_correction as f  # noqa: E402

TRUTH = (2.9e-6, 0.6, 22.0, 2.0, 6e-6)


def write_log(path, op, ranks, nodes, tuning):
    with open(path, "w") as out:
        out.write("# nThread 1 nGpus 1 minBytes 1024 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20\n")
        for r in range(ranks):
            out.write(f"#  Rank {r:2d} Group  0 Pid {100 + r} on node{r * nodes // ranks} device  {r % (ranks // nodes)} "
                      "[0x18] NVIDIA H100 80GB HBM3\n")
        out.write("#       size         count      type   redop    root     time   algbw   busbw #wrong"
                  "     time   algbw   busbw #wrong\n")
        for k in range(10, 34):
            b = 1 << k
            a, p, (lat, bw) = f.chosen(tuning, op, ranks, nodes, b)
            us = f.measured_time(op, a, p, nodes, b, lat, bw, TRUTH) * 1e6
            out.write(f"{b:12d} {b // 4:13d}     float     sum      -1 {us:8.2f}    0.00    0.00      0 "
                      f"{us * 1.02:8.2f}    0.00    0.00      0\n")


def main():
    tuning = json.load(open(os.path.join(f.ROOT, "topologies", "dgx-h100-4node.json")))["communication"]["network_tuning"]
    write_log(os.path.join(sys.argv[1], "ar2.log"), "all_reduce", 16, 2, tuning)
    write_log(os.path.join(sys.argv[1], "ar4.log"), "all_reduce", 32, 4, tuning)
    write_log(os.path.join(sys.argv[1], "ag4.log"), "all_gather", 32, 4, tuning)
    print(json.dumps(dict(zip(f.KEYS, TRUTH))))


if __name__ == "__main__":
    main()
