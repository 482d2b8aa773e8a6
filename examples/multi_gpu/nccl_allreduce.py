#!/usr/bin/env python3
"""weft inside an NCCL program: one process per GPU (torch.distributed, backend nccl).

Each rank makes its shard x_r (a seeded generator per rank, so every rank can rebuild every shard), runs
weft's kernel y_r = a * x_r^2 + x_r on its own GPU on torch's current stream (libweft_shard.so through
ctypes), all-reduces y with NCCL, and checks the sum against a float64 reference of all ranks' shards.
Then the same step is captured in a CUDA graph (weft's launch and NCCL's all-reduce in one graph), replayed
on fresh inputs and checked again.

    python3 examples/multi_gpu/nccl_allreduce.py [--world-size N] [--n ELEMENTS] [--lib build/examples/libweft_shard.so]

--world-size defaults to every GPU torch sees (1 GPU: a one-rank NCCL run, which still checks the kernel,
the stream hand-off and the graph capture). NVLink multicast (NVLS) stays off. Exit status 0 when every
rank passes.
"""
import argparse
import ctypes
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on the shared machines

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

A = 0.75


def shard(rank, step, n, device):
    g = torch.Generator(device="cpu").manual_seed(1000 * step + rank)
    return (torch.rand(n, generator=g, dtype=torch.float32) * 4 - 2).to(device)


def reference(world, step, n):
    total = torch.zeros(n, dtype=torch.float64)
    for r in range(world):
        x = shard(r, step, n, "cpu").double()
        total += A * x * x + x
    return total


class WeftShard:
    def __init__(self, path):
        self.lib = ctypes.CDLL(os.path.abspath(path))
        self.lib.weft_shard_run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_float, ctypes.c_void_p]
        self.lib.weft_shard_run.restype = ctypes.c_int
        self.lib.weft_shard_last_error.restype = ctypes.c_char_p

    def __call__(self, x, y):
        rc = self.lib.weft_shard_run(x.device.index, x.data_ptr(), y.data_ptr(), x.numel(), A,
                                     torch.cuda.current_stream(x.device).cuda_stream)
        if rc != 0:
            raise RuntimeError("weft: " + self.lib.weft_shard_last_error().decode())


def check(name, rank, got, want):
    err = (got.double().cpu() - want).abs().max().item()
    tol = 1e-5 * want.abs().max().item() + 1e-5
    ok = err <= tol and torch.isfinite(got).all().item()
    print(f"rank {rank}: {name}: max |error| {err:.3g} (tolerance {tol:.3g}) {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def run(rank, world, args, results):
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{args.port}")
    weft = WeftShard(args.lib)
    ok = True
    # 1. Eager: weft on torch's stream, then NCCL on the same stream.
    x = shard(rank, 0, args.n, device)
    y = torch.full_like(x, float("nan"))
    weft(x, y)
    dist.all_reduce(y)
    torch.cuda.synchronize()
    ok &= check("eager weft + all_reduce", rank, y, reference(world, 0, args.n))
    # 2. A CUDA graph of both (weft compiled and warmed up above; capture on a side stream, as torch does).
    static_x = shard(rank, 1, args.n, device)
    static_y = torch.full_like(static_x, float("nan"))
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        weft(static_x, static_y)  # warm-up on the capture stream
        dist.all_reduce(static_y)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        weft(static_x, static_y)
        dist.all_reduce(static_y)
    for step in (2, 3):
        static_x.copy_(shard(rank, step, args.n, device))
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ok &= check(f"CUDA graph replay {step - 1}", rank, static_y, reference(world, step, args.n))
    dist.destroy_process_group()
    results[rank] = 1 if ok else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=0)
    parser.add_argument("--n", type=int, default=(1 << 22) + 77)
    parser.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "../../build/examples/libweft_shard.so"))
    parser.add_argument("--port", type=int, default=29517)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("nccl_allreduce: no CUDA GPU visible to torch", file=sys.stderr)
        return 1
    world = args.world_size or torch.cuda.device_count()
    if world > torch.cuda.device_count():
        print(f"nccl_allreduce: --world-size {world} but torch sees {torch.cuda.device_count()} GPU(s)", file=sys.stderr)
        return 1
    results = mp.get_context("spawn").Array("i", [0] * world)
    mp.spawn(run, args=(world, args, results), nprocs=world, join=True)
    passed = all(results[r] == 1 for r in range(world))
    print(f"nccl_allreduce: {world} rank(s): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
