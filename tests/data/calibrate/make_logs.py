#!/usr/bin/env python3
"""Writes the nccl-tests logs of this folder. They are CONSTRUCTED, not captured: the layout follows
nccl-tests' own printing code (src/util.cu writeDeviceReport / writeResultHeader /
writeBenchmarkLinePreamble / writeBenchmarkLineBody / getFloatStr, github.com/NVIDIA/nccl-tests) and
logs users posted in NVIDIA/nccl-tests issues #107, #252 and coreweave/nccl-tests#43; the times come
from an alpha-beta model with the constants below, so that tests know what a fit must recover.

  python3 make_logs.py      # rewrites the .log files next to it
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def float_str(value, width):
    """nccl-tests getFloatStr: 2 decimals while the integer part fits, then 1, then 0, then %e."""
    power = 0
    val = 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return "%*.2f" % (width, value)
    if power < width - 1:
        return "%*.1f" % (width, value)
    if power < width + 1:
        return "%*.0f" % (width, value)
    return "%*.1e" % (width, value)


def factor(op, n):
    return {"all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_reduce": 2 * (n - 1) / n,
            "all_to_all": (n - 1) / n, "sendrecv": 1.0}[op]


def rows(op, n, sizes, lat_us, busbw_GBps, redop, root_col, wrong_col, ip_scale=1.0):
    out = []
    for size in sizes:
        t = lat_us + size * factor(op, n) / (busbw_GBps * 1e9) * 1e6
        t_ip = t * ip_scale
        count = size // 4 // (n if op in ("all_gather", "reduce_scatter") else 1)
        line = "%12d  %12d  %8s  %6s" % (size, count, "float", redop)
        if root_col:
            line += "  %6s" % "-1"
        for tt in (t, t_ip):
            alg = size / tt / 1e3  # GB/s from bytes and microseconds
            bus = alg * factor(op, n)
            line += "  %7s  %6s  %6s" % (float_str(tt, 7), float_str(alg, 6), float_str(bus, 6))
            line += "  %6s" % ("0" if wrong_col else "0e+00")
        out.append(line)
    return out


def avg_busbw(row_lines, root_col):
    """'# Avg bus bandwidth': the mean of the printed out-of-place busbw column."""
    col = 7 if root_col else 6
    vals = [float(r.split()[col]) for r in row_lines]
    return "%g" % (sum(vals) / len(vals))


def header(root_col, wrong_col):
    if root_col:
        return ["#                                                              out-of-place                       in-place          ",
                "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
                "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    return ["#                                                     out-of-place                       in-place",
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


# 1. nccl-tests 2.17 (newest layout), all_gather_perf on one 8-GPU H100 node.
#    Model: latency 12 us, busbw 360 GB/s; in-place 2% faster.
sizes = [1024 * 4 ** i for i in range(11)]  # 1 KiB .. 1 GiB
lines = ["# fusesim test fixture, CONSTRUCTED (tests/data/calibrate/make_logs.py), layout of nccl-tests 2.17",
         "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
         "# Collective test starting: all_gather_perf",
         "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
         "#",
         "# Using devices"]
for r in range(8):
    lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                 % (r, 0, 41230 + r, "dgx-h100-07", r, 0, 0x18 + 0x10 * r, 0, "NVIDIA H100 80GB HBM3"))
lines.append("#")
lines += header(True, True)
data = rows("all_gather", 8, sizes, 12.0, 360.0, "none", True, True, ip_scale=0.98)
lines += data
lines += ["# Out of bounds values : 0 OK",
          "# Avg bus bandwidth    : %s " % avg_busbw(data, True),
          "#",
          "# Collective test concluded: all_gather_perf",
          "#"]
write("all_gather_h100x8_v2.17.log", lines)

# 2. nccl-tests 2.13 layout through OpenMPI --tag-output, all_reduce_perf on 2 nodes x 8 H100.
#    NCCL's INFO banner gives the library version; the program is named on the mpirun line only.
#    Model: latency 45 us, busbw 180 GB/s; in-place equal.
sizes = [1048576 * 2 ** i for i in range(11)]  # 1 MiB .. 1 GiB
tag = "[1,0]<stdout>:"
lines = ["# fusesim test fixture, CONSTRUCTED (tests/data/calibrate/make_logs.py), layout of nccl-tests 2.13 under mpirun --tag-output",
         "$ mpirun -np 16 -H dgx-a:8,dgx-b:8 --tag-output ./build/all_reduce_perf -b 1M -e 1G -f 2 -g 1",
         tag + "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
         tag + "#",
         tag + "# Using devices"]
for r in range(16):
    host = "dgx-a" if r < 8 else "dgx-b"
    lines.append(tag + "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s"
                 % (r, 0, 5100 + r, host, r % 8, 0x18 + 0x10 * (r % 8), "NVIDIA H100 80GB HBM3"))
lines.append("[1,0]<stderr>:dgx-a:5100:5100 [0] NCCL INFO NCCL version 2.18.5+cuda12.2")
lines.append(tag + "#")
lines += [tag + l for l in header(True, True)]
data = rows("all_reduce", 16, sizes, 45.0, 180.0, "sum", True, True)
lines += [tag + l for l in data]
lines += [tag + "# Out of bounds values : 0 OK", tag + "# Avg bus bandwidth    : %s " % avg_busbw(data, True), tag + "#"]
write("all_reduce_h100x16_2node_mpi_v2.13.log", lines)

# 3. An older layout (before 2.13: no root column, "error" holds the max deviation), 8 A100 GPUs
#    in one process, no program name anywhere: the importer needs --op reduce_scatter.
#    Model: latency 20 us, busbw 230 GB/s; in-place equal.
sizes = [65536 * 4 ** i for i in range(8)]  # 64 KiB .. 1 GiB
lines = ["# fusesim test fixture, CONSTRUCTED (tests/data/calibrate/make_logs.py), layout of nccl-tests before 2.13 (issue #107)",
         "# nThread 1 nGpus 8 minBytes 65536 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 validation: 1",
         "#",
         "# Using devices"]
for r in range(8):
    lines.append("#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" % (r, 777, "a100-node", r, 0x07 + r, "A100-SXM4-40GB"))
lines.append("#")
lines += header(False, False)
data = rows("reduce_scatter", 8, sizes, 20.0, 230.0, "sum", False, False)
lines += data
lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : %s " % avg_busbw(data, False), "#"]
write("reduce_scatter_a100x8_old.log", lines)

# 4. nccl-tests 2.17, all_reduce_perf on one 8-GPU H100 node with NVLS (NVLink SHARP: the NVSwitch
#    reduces, so each GPU sends its data once): bus bandwidth above NVLink4's 450 GB/s line rate, which
#    no ring reaches. Model: latency 25 us, busbw 480 GB/s (NVLS all-reduce on H100 reports ~480).
sizes = [1048576 * 4 ** i for i in range(6)]  # 1 MiB .. 1 GiB
lines = ["# fusesim test fixture, CONSTRUCTED (tests/data/calibrate/make_logs.py), layout of nccl-tests 2.17, NVLS on",
         "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
         "# Collective test starting: all_reduce_perf",
         "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
         "#",
         "# Using devices"]
for r in range(8):
    lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                 % (r, 0, 52000 + r, "dgx-h100-03", r, 0, 0x18 + 0x10 * r, 0, "NVIDIA H100 80GB HBM3"))
lines.append("#")
lines += header(True, True)
data = rows("all_reduce", 8, sizes, 25.0, 480.0, "sum", True, True)
lines += data
lines += ["# Out of bounds values : 0 OK",
          "# Avg bus bandwidth    : %s " % avg_busbw(data, True),
          "#",
          "# Collective test concluded: all_reduce_perf",
          "#"]
write("all_reduce_h100x8_nvls_v2.17.log", lines)
