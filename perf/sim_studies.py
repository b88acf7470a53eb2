"""The source papers' experiments, replayed in SimGrid by hpccoll.sim (perf/simulation.md).

1. "RAT - Resilient Allreduce Tree for Distributed Machine Learning", oversubscription: 2
   spines, 4 leaves, hosts per leaf from 4 to 24 (2:1 to 12:1 at 40 Gbit/s everywhere), a
   97 MiB allreduce (ResNet-50's gradients): parameter server, ring, RAT.
2. The same paper, failures: 2 racks x 32 hosts at 40 Gbit/s without oversubscription, k
   nodes paused and re-drawn every period (seeds 0-2, mean): ring, RAT, parameter server.
3. "TASP: Topology-aware Sequence Parallelism": ring against multi-ring allgather of the K and
   V blocks at the sequence lengths of its Table 1, on an 8-GPU full mesh (MI300X-like; also
   the cost model's H100 preset), an 8-GPU switch (H100 NVSwitch-like) and 2 and 4 such
   nodes, plus the attention step pattern with the paper's measured compute-to-communication
   ratios.
4. The all-to-all topology study of "All-to-all (parallel pattern)" (docs/references.md [4]):
   ring, ring_bidirectional, pairwise, xor, hypercube, bruck, the 2-D mesh's two phases and
   direct on 2-D tori and meshes and on fat trees, blocks of 8 B to 1 MiB per peer, beside
   the article's cost formulas (``alltoall-topology``: 64 ranks on the grids, 128 on a fat
   tree; ``alltoall-topology-large``: 256 on the grids, ``alltoall-topology-1024``: 1,024
   on a torus and a fat tree, the log-round and mesh algorithms), and the traffic by level
   of each algorithm.
5. "Swing: Short-cutting Rings for Higher Bandwidth Allreduce" (``swing-torus``): Swing's
   allreduces against ring, recursive doubling and Rabenseifner on 8x8 and 16x16 tori.
6. "Bine Trees: Enhancing Collective Operations by Optimizing Communication Locality"
   (``bine-locality``): Bine broadcast, reduce, allgather, reduce-scatter and allreduce
   against binomial trees and recursive doubling / halving on a dragonfly and a fat tree,
   time and bytes by link level.
7. NCCL 2.23's PAT (``pat-scale``): the allgather at 64-256 ranks of one GPU a node against
   ring and Bruck.
8. The Swing study at 1,024 ranks (``swing-torus-1024``: a 32 x 32 torus), PAT at 1,024 and
   4,096 ranks (``pat-1024``, ``pat-4096``), Bine on fat trees tapered 2:1 and 4:1 between
   pods (``bine-tapered``).

Usage: python perf/sim_studies.py [rat-oversubscription|rat-failures|tasp|alltoall-topology|
alltoall-topology-large|alltoall-topology-1024|swing-torus|bine-locality|pat-scale|
swing-torus-1024|pat-1024|pat-4096|bine-tapered ...]
(the first three by default; needs SimGrid: scripts/install-sim.sh).  Prints markdown.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from typing import Any

from hpccoll.sim.native import select
from hpccoll.sim.platform import build
from hpccoll.sim.replay import Pause
from hpccoll.tools.simulate import measured, simulated_results

RESNET50 = 97 << 20
MIB = 1 << 20


def rat_oversubscription() -> str:
    out = ["| hosts/leaf | ranks | oversubscription | ring (ms) | RAT (ms) | PS (ms) | "
           "PS / RAT | ring / RAT |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hosts in (4, 8, 12, 16, 20, 24):
        target = build(f"spineleaf:spines=2,leaves=4,hosts={hosts}")
        times = {r.algorithm: r.time_us / 1e3 for r in
                 simulated_results("allreduce", ["ring", "rat", "ps"], target, [RESNET50],
                                   "float32")}
        out.append(f"| {hosts} | {target.ranks} | {target.notes['oversubscription']} | "
                   f"{times['ring']:.1f} | {times['rat']:.1f} | {times['ps']:.1f} | "
                   f"{times['ps'] / times['rat']:.2f} | {times['ring'] / times['rat']:.2f} |")
    return "\n".join(out)


def rat_failures() -> str:
    target = build("spineleaf:spines=2,leaves=2,hosts=32,uplink=640Gb/s")
    out = ["| paused k | period | ring (ms) | RAT (ms) | PS (ms) | ring / no pause | "
           "RAT / no pause | PS / no pause | ring / RAT |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base: dict[str, float] = {}
    for k in (0, 1, 2, 4, 8):
        for period in ((1e-3,) if k == 0 else (1e-3, 10e-3)):
            runs = [simulated_results("allreduce", ["ring", "rat", "ps"], target, [RESNET50],
                                      "float32", Pause(k, period, seed))
                    for seed in ((0,) if k == 0 else (0, 1, 2))]
            mean = {name: statistics.mean(r.time_us / 1e3 for run in runs for r in run
                                          if r.algorithm == name)
                    for name in ("ring", "rat", "ps")}
            base = base or mean
            out.append(f"| {k} | {period * 1e3:g} ms | {mean['ring']:.1f} | {mean['rat']:.1f} | "
                       f"{mean['ps']:.1f} | {mean['ring'] / base['ring']:.2f} | "
                       f"{mean['rat'] / base['rat']:.2f} | {mean['ps'] / base['ps']:.2f} | "
                       f"{mean['ring'] / mean['rat']:.2f} |")
    return "\n".join(out)


# Table 1 of the TASP paper (8 x MI300X): sequence length, CCR of the baseline, speedup
TASP_TABLE1 = [(10_000, 0.39, 2.4), (20_000, 0.65, 1.8), (40_000, 0.80, 1.5),
               (50_000, 0.98, 1.3), (100_000, 1.17, 1.1)]
HEADS, HEAD_DIM, BF16 = 12, 64, 2
TASP_PLATFORMS = [
    ("8 GPUs, full mesh 64 GB/s per link (MI300X-like; the cost model's h100 node)",
     "fullmesh:n=8,bw=64GB/s", False),
    ("8 GPUs, switch 450 GB/s per port (H100 NVSwitch-like)", "switch:n=8,bw=450GB/s", False),
    ("2 nodes x 8 (full mesh), NIC 50 GB/s per GPU", "cluster:nodes=2,ppn=8", False),
    ("2 nodes x 8 (full mesh), NIC 50 GB/s, flat cycles", "cluster:nodes=2,ppn=8", True),
    ("4 nodes x 8 (full mesh), NIC 50 GB/s per GPU", "cluster:nodes=4,ppn=8", False),
    ("4 nodes x 8 (full mesh), NIC 50 GB/s, flat cycles", "cluster:nodes=4,ppn=8", True),
    ("4 nodes x 8 (full mesh), NIC 6.25 GB/s per GPU", "cluster:nodes=4,ppn=8,nic=6.25GB/s",
     False),
]


def kv_block(length: int, ranks: int) -> int:
    """Bytes of one rank's K and V block (batch 1, 12 heads of 64, bf16)."""
    return 2 * (length // ranks) * HEADS * HEAD_DIM * BF16


def attention_speedup(ring_us: float, multi_us: float, ccr: float, p: int) -> float:
    """Ring Attention's time over TASP's with the communication of each step overlapped with
    the computation on the block that arrived before: (p-1) x max(step comm, step compute)
    + one step of compute, the compute per step CCR x ring's communication / p."""
    compute = ccr * ring_us / p
    ring = (p - 1) * max(ring_us / (p - 1), compute) + compute
    multi = (p - 1) * max(multi_us / (p - 1), compute) + compute
    return ring / multi


def tasp() -> str:
    out = ["| platform | S | KV block / rank | ring (us) | multiring (us) | comm speedup | "
           "model's comm speedup | attention speedup at the paper's CCR | paper |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, spec, flat in TASP_PLATFORMS:
        target = build(spec)
        p = target.ranks
        sizes = [kv_block(length * p // 8, p) for length, _, _ in TASP_TABLE1]
        results = simulated_results("allgather", ["ring", "multiring"], target, sizes, "float32",
                           flat=flat)
        for (length, ccr, paper), size in zip(TASP_TABLE1, sizes):
            row = {r.algorithm: r for r in results if r.bytes == size}
            ring, multi = row["ring"], row["multiring"]
            out.append(
                f"| {label} | {length * p // 8 // 1000}K | {size / MIB:.1f} MiB | "
                f"{ring.time_us:.0f} | {multi.time_us:.0f} | "
                f"{ring.time_us / multi.time_us:.2f} | {ring.model_us / multi.model_us:.2f} | "
                f"{attention_speedup(ring.time_us, multi.time_us, ccr, p):.2f} | "
                f"{paper if p == 8 else '-'} |")
    return "\n".join(out)


ALLTOALL = ["ring", "ring_bidirectional", "pairwise", "xor", "hypercube", "bruck", "mesh",
            "direct"]


def article_cost(name: str, p: int, m: float, ts: float, tw: float) -> float:
    """The article's time of an all-to-all of m bytes per peer on p ranks, each message to a
    neighbour with no contention (t_s a step's start-up, t_w seconds per byte): ring
    (t_s + t_w m p / 2)(p - 1); 2-D mesh (2 t_s + t_w m p)(sqrt p - 1); hypercube
    log p (t_s + t_w m p / 2); 1-factor (pairwise, xor) (p - 1)(t_s + t_w m).  Not in the
    article, derived the same way: the bidirectional ring, half each way, ceil((p - 1) / 2)
    steps and t_w m p^2 / 8 per direction; Bruck, as the hypercube (log p rounds of p / 2
    blocks); direct, every block at once through the rank's one port: t_s + t_w m (p - 1)."""
    log = math.log2(p)
    return {"ring": (ts + tw * m * p / 2) * (p - 1),
            "ring_bidirectional": math.ceil((p - 1) / 2) * ts + tw * m * p * p / 8,
            "mesh": (2 * ts + tw * m * p) * (math.sqrt(p) - 1),
            "hypercube": log * (ts + tw * m * p / 2), "bruck": log * (ts + tw * m * p / 2),
            "pairwise": (p - 1) * (ts + tw * m), "xor": (p - 1) * (ts + tw * m),
            "direct": ts + tw * m * (p - 1)}[name]


def _fmt_us(us: float) -> str:
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


ARTICLE = ["ring", "mesh", "hypercube", "pairwise"]       # the four the article analyses


def alltoall_study(platforms: list[str], names: list[str], sizes: list[int]) -> str:
    """Per platform: each block size's simulated time of every algorithm named (the fastest
    in bold), what MPICH selects (``native:mpich``: the time of that algorithm, which its
    replay equals, tests/unit/test_sim_native.py), the fastest simulated, the fastest simulated of the four the article analyses
    (ring, 2-D mesh, hypercube, 1-factor = pairwise) and the fastest of those by its formulas
    (:func:`article_cost`, t_s = step overhead + one hop's latency, t_w = 1 / link
    bandwidth); then, at the largest size, each algorithm's traffic by level and busiest
    link."""
    out = []
    four = [a for a in ARTICLE if a in names]
    for spec in platforms:
        target = build(spec)
        p = target.ranks
        began = time.perf_counter()
        results, speed, loads = measured("alltoall", names, target, sizes, "float32")
        wall = time.perf_counter() - began
        ts = target.machine.step_overhead + min(l.latency for l in target.links)
        tw = 1 / max(l.bandwidth for l in target.links)
        out.append(f"#### `{spec}` ({p} ranks)\n")
        out.append("| block / peer | " + " | ".join(names) + " | native:mpich | fastest | "
                   "fastest of the article's four | article's fastest | article's time of it "
                   "(us) |")
        out.append("|---:|" + "---:|" * len(names) + "---|---|---|---|---:|")
        for size in sizes:
            row = {r.algorithm: r.time_us for r in results if r.bytes == size}
            best = min(row, key=row.get)
            best_four = min(four, key=row.get)
            article = {a: article_cost(a, p, size, ts, tw) * 1e6 for a in four}
            paper_best = min(article, key=article.get)
            cells = [f"**{_fmt_us(row[a])}**" if a == best else _fmt_us(row[a])
                     for a in names]
            mpich = select("native:mpich", "alltoall", p, size, 4).algorithm
            picked = f"{mpich}: {_fmt_us(row[mpich])}" if mpich in row else f"{mpich} (not run)"
            out.append(f"| {size:,} B | " + " | ".join(cells) + f" | {picked} | {best} | "
                       f"{best_four} | {paper_best} | {_fmt_us(article[paper_best])} |")
        out.append(f"\n({speed['transfers']:,} transfers simulated in "
                   f"{speed['simulation_s']:.0f} s, planning {speed['planning_s']:.0f} s, "
                   f"{wall:.0f} s in all; times in us; t_s {ts * 1e6:g} us, "
                   f"t_w 1 / {1 / tw / 1e9:g} GB/s)\n")
        size = sizes[-1]
        levels = list(loads[0].reach)
        out.append(f"Traffic at {size:,} B per peer (MB; `links`: bytes x links crossed at "
                   "that level; `reach`: bytes of the messages whose route climbs no higher; "
                   "busiest / ideal: the busiest link's bytes over a rank's own (p - 1) "
                   "blocks):\n")
        out.append("| algorithm | sent | " + " | ".join(f"links {n}" for n in levels)
                   + " | " + " | ".join(f"reach {n}" for n in levels)
                   + " | busiest link | busiest / ideal |")
        out.append("|---|---:|" + "---:|" * (2 * len(levels)) + "---:|---:|")
        ideal = (p - 1) * size
        for r, load in zip(results, loads):
            if r.bytes != size:
                continue
            out.append(f"| {r.algorithm} | {load.total / 1e6:,.1f} | "
                       + " | ".join(f"{load.link_bytes[n] / 1e6:,.1f}" for n in levels) + " | "
                       + " | ".join(f"{load.reach[n] / 1e6:,.1f}" for n in levels)
                       + f" | {load.busiest / 1e6:,.2f} | {load.busiest / ideal:.2f} |")
        out.append("")
        print(f"<!-- {spec} done in {wall:.0f} s -->", file=sys.stderr, flush=True)
    return "\n".join(out)


def alltoall_topology() -> str:
    """64 ranks on the grids with direct, 128 on a fat tree without (16,256 flows at once
    make each of SimGrid's sharing updates slow)."""
    return "\n".join([
        alltoall_study(["torus:dims=8x8", "mesh:dims=8x8"], ALLTOALL,
                       [8, 1 << 10, 64 << 10, 1 << 20]),
        alltoall_study(["fattree:k=8"], ALLTOALL[:-1], [8, 1 << 10, 64 << 10, 1 << 20])])


def _each(studies: list[tuple[list[str], list[str], list[int]]]) -> str:
    """Each study's tables printed as soon as it is done (a long run keeps what it made)."""
    for platforms, names, sizes in studies:
        print(alltoall_study(platforms, names, sizes), flush=True)
    return "(the tables above, one platform at a time)"


def alltoall_topology_large() -> str:
    """256 ranks on the grids, the algorithms of log p or 2 sqrt(p) rounds only (hypercube,
    bruck, mesh): ring, pairwise, xor and direct are p - 1 rounds of p transfers, 65 K
    transfers a size, more than this shared 2-core machine gave in the time."""
    return _each([(["torus:dims=16x16", "mesh:dims=16x16"], ["hypercube", "bruck", "mesh"],
                   [8, 64 << 10, 1 << 20])])


def alltoall_topology_1024() -> str:
    """1,024 ranks on a torus and a fat tree: hypercube and Bruck (10 rounds of 1,024
    transfers), then the 2-D mesh (2 phases of 31,744 flows at once, each of SimGrid's full
    sharing updates over all of them)."""
    return _each([(["torus:dims=32x32", "fattree:k=16"], ["hypercube", "bruck"],
                   [8, 1 << 20]),
                  (["torus:dims=32x32", "fattree:k=16"], ["mesh"], [8, 1 << 20])])


def compare(collective: str, spec: str, runs: list[tuple[str, str, tuple]],
            sizes: list[int], new: set[str], size_by_size: bool = False) -> str:
    """One platform: every run's (label, algorithm, planner options) simulated time at each
    size (us, the fastest in bold), the fastest of the labels in ``new`` against the fastest
    of the others (baseline / new: above 1 where a new algorithm wins), then, at the largest
    size, each run's traffic by level (MB; ``links``: bytes x links crossed at that level;
    ``reach``: bytes of the messages whose route climbs no higher) and busiest link.
    ``size_by_size`` plans and replays one size at a time (at 4,096 ranks a ring's
    flattened jobs of every size at once would take 4 GB).  The wall time is followed by the machine's
    1-minute load average before and after (the machine is shared)."""
    target = build(spec)
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    rows: dict[tuple[str, int], Any] = {}
    loads: dict[str, Any] = {}
    by_options: dict[tuple, list[tuple[str, str]]] = {}
    for label, name, options in runs:
        by_options.setdefault(options, []).append((label, name))
    for group in ([[size] for size in sizes] if size_by_size else [sizes]):
        for options, named in by_options.items():
            results, _, traffic = measured(collective, [n for _, n in named], target, group,
                                           "float32", options=options)
            label_of = {n: label for label, n in named}
            for result, load in zip(results, traffic):
                rows[label_of[result.algorithm], result.bytes] = result
                if result.bytes == max(sizes):
                    loads[label_of[result.algorithm]] = load
        if size_by_size:
            print(f"<!-- {spec} {collective} {group[0]:,} B done at "
                  f"{time.perf_counter() - began:.0f} s -->", file=sys.stderr, flush=True)
    wall = time.perf_counter() - began
    load_after = os.getloadavg()[0]
    labels = [label for label, _, _ in runs]
    out = [f"#### `{spec}` ({target.ranks} ranks), {collective}\n",
           "| bytes | " + " | ".join(labels) + " | baseline / new |",
           "|---:|" + "---:|" * (len(labels) + 1)]
    for size in sorted({b for _, b in rows}):
        times = {label: rows[label, size].time_us for label in labels}
        best = min(times, key=times.get)
        cells = [f"**{_fmt_us(times[a])}**" if a == best else _fmt_us(times[a])
                 for a in labels]
        ratio = (min(t for a, t in times.items() if a not in new)
                 / min(t for a, t in times.items() if a in new))
        out.append(f"| {size:,} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    levels = list(next(iter(loads.values())).reach)
    out.append(f"\n(times in us; {wall:.0f} s, load {load_before:.1f} before, "
               f"{load_after:.1f} after)\n\nTraffic at {max(sizes):,} B (MB):\n")
    out.append("| algorithm | " + " | ".join(f"links {n}" for n in levels) + " | "
               + " | ".join(f"reach {n}" for n in levels) + " | busiest link |")
    out.append("|---|" + "---:|" * (2 * len(levels) + 1))
    for label in labels:
        load = loads[label]
        out.append(f"| {label} | " + " | ".join(f"{load.link_bytes[n] / 1e6:,.1f}"
                                                for n in levels) + " | "
                   + " | ".join(f"{load.reach[n] / 1e6:,.1f}" for n in levels)
                   + f" | {load.busiest / 1e6:,.2f} |")
    print(f"<!-- {spec} {collective} done in {wall:.0f} s -->", file=sys.stderr, flush=True)
    return "\n".join(out) + "\n"


SIZES_32B_128MIB = [32, 1 << 10, 32 << 10, 1 << 20, 16 << 20, 128 << 20]


def swing_torus() -> str:
    """"Swing: Short-cutting Rings for Higher Bandwidth Allreduce": the allreduce on 2-D
    tori, Swing (bandwidth- and latency-optimal forms, and the torus form running one
    instance per dimension and direction) against ring, recursive doubling and Rabenseifner,
    32 B - 128 MiB."""
    tables = []
    for dims in ("8x8", "16x16"):
        runs = [("ring", "ring", ()), ("recursive_doubling", "recursive_doubling", ()),
                ("rabenseifner", "rabenseifner", ()), ("swing", "swing", ()),
                ("swing_latency", "swing_latency", ()),
                (f"swing dims={dims}", "swing", (("dims", dims),))]
        tables.append(compare("allreduce", f"torus:dims={dims}", runs, SIZES_32B_128MIB,
                              {"swing", "swing_latency", f"swing dims={dims}"}))
        print(tables[-1], flush=True)
    return "(the tables above)"


def swing_torus_1024() -> str:
    """The ``swing-torus`` study at 1,024 ranks: the same algorithms and sizes on
    ``torus:dims=32x32``, one size at a time (a ring allreduce is 2,095,104 transfers a
    size)."""
    runs = [("ring", "ring", ()), ("recursive_doubling", "recursive_doubling", ()),
            ("rabenseifner", "rabenseifner", ()), ("swing", "swing", ()),
            ("swing_latency", "swing_latency", ()),
            ("swing dims=32x32", "swing", (("dims", "32x32"),))]
    print(compare("allreduce", "torus:dims=32x32", runs, SIZES_32B_128MIB,
                  {"swing", "swing_latency", "swing dims=32x32"}, size_by_size=True),
          flush=True)
    return "(the table above)"


BINE_PLATFORMS = ["dragonfly:groups=8,routers=8,hosts=2", "fattree:k=8"]


def bine_locality() -> str:
    """"Bine Trees: Enhancing Collective Operations by Optimizing Communication Locality":
    Bine broadcast and reduce against the binomial tree, Bine allgather, reduce-scatter and
    allreduce against recursive doubling / halving (and Rabenseifner), 128 ranks on a
    dragonfly and a fat tree, with the bytes on each level's links (global links on the
    dragonfly, core links on the fat tree); vectors of 32 B - 16 MiB, allgather blocks of
    32 B - 1 MiB a rank."""
    sizes = [32, 32 << 10, 1 << 20, 16 << 20]
    studies = [("bcast", ["binomial", "bine"]), ("reduce", ["binomial", "bine"]),
               ("allgather", ["recursive_doubling", "bine"]),
               ("reduce_scatter", ["recursive_halving", "bine"]),
               ("allreduce", ["recursive_doubling", "rabenseifner", "bine"])]
    for spec in BINE_PLATFORMS:
        for collective, names in studies:
            print(compare(collective, spec, [(n, n, ()) for n in names],
                          sizes[:-1] if collective == "allgather" else sizes, {"bine"}),
                  flush=True)
    return "(the tables above)"


def pat_scale() -> str:
    """NCCL 2.23's PAT: the allgather at 64, 128 and 256 ranks of one GPU a node (the case
    NCCL made PAT for), against ring and Bruck's allgather, blocks of 32 B to 1 MiB a rank."""
    for nodes in (64, 128, 256):
        print(compare("allgather", f"cluster:nodes={nodes},ppn=1,nics=1",
                      [(n, n, ()) for n in ("ring", "bruck", "pat")],
                      [32, 32 << 10, 1 << 20], {"pat"}),
              flush=True)
    return "(the tables above)"


def pat_1024() -> str:
    """PAT at 1,024 ranks of one GPU a node against ring and Bruck, blocks of 32 B to 1 MiB a
    rank, one size at a time (a ring allgather is 1,047,552 transfers a size)."""
    print(compare("allgather", "cluster:nodes=1024,ppn=1,nics=1",
                  [(n, n, ()) for n in ("ring", "bruck", "pat")], [32, 32 << 10, 1 << 20],
                  {"pat"}, size_by_size=True), flush=True)
    return "(the table above)"


def pat_4096() -> str:
    """PAT at 4,096 ranks against ring and Bruck, blocks of 32 B to 1 MiB a rank, one size at
    a time: a ring allgather is 16,773,120 transfers a size, and so is PAT's at 1 MiB (its
    1 MiB buffer holds one block, so it runs p - 1 rounds of one block, ring's schedule)."""
    print(compare("allgather", "cluster:nodes=4096,ppn=1,nics=1",
                  [(n, n, ()) for n in ("ring", "bruck", "pat")], [32, 32 << 10, 1 << 20],
                  {"pat"}, size_by_size=True), flush=True)
    return "(the table above)"


def bine_tapered() -> str:
    """The Bine study on tapered fat trees: ``fattree:k=8`` (128 ranks) with the
    aggregation-to-core links at 1/2 and 1/4 of the host links (2:1 and 4:1 between pods),
    the collectives and baselines of ``bine-locality``."""
    sizes = [32, 32 << 10, 1 << 20, 16 << 20]
    studies = [("bcast", ["binomial", "bine"]), ("reduce", ["binomial", "bine"]),
               ("allgather", ["recursive_doubling", "bine"]),
               ("reduce_scatter", ["recursive_halving", "bine"]),
               ("allreduce", ["recursive_doubling", "rabenseifner", "bine"])]
    for taper in (2, 4):
        for collective, names in studies:
            print(compare(collective, f"fattree:k=8,taper={taper}",
                          [(n, n, ()) for n in names],
                          sizes[:-1] if collective == "allgather" else sizes, {"bine"}),
                  flush=True)
    return "(the tables above)"


STUDIES = {"rat-oversubscription": rat_oversubscription, "rat-failures": rat_failures,
           "tasp": tasp, "alltoall-topology": alltoall_topology,
           "alltoall-topology-large": alltoall_topology_large,
           "alltoall-topology-1024": alltoall_topology_1024, "swing-torus": swing_torus,
           "bine-locality": bine_locality, "pat-scale": pat_scale,
           "swing-torus-1024": swing_torus_1024, "pat-1024": pat_1024, "pat-4096": pat_4096,
           "bine-tapered": bine_tapered}
DEFAULT = ["rat-oversubscription", "rat-failures", "tasp"]


def main(names: list[str]) -> None:
    for name in names or DEFAULT:
        began = time.time()
        print(f"### {name}\n\n{STUDIES[name]()}\n\n({time.time() - began:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
