"""Where the time of each recipe op goes on cuDF: for the next GPU lease.

The fourth GPU run (bench/README.md) measured the kit's recipe on cuDF at about pandas
speed at 1M rows (MinMax 8.6 ms a column where a column is 8 MB): overhead, not work.
This script times each op of the benchmark recipe on cuDF under each RMM memory resource
(cuDF's default, CUDA's async allocator, a pool), each in its own process since the
resource must be set before cuDF allocates, and prints the cProfile functions that took
the op's time. Run it on a machine with cuDF and a GPU, from the project root:

    PYTHONPATH=$PWD python3 bench/cudf_profile.py [--rows 1000000] [--tables sensor,transactions]
        [--allocators default,async,pool] [--top 12]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import statistics
import subprocess
import sys
import time


def _set_allocator(name: str) -> None:
    import rmm

    if name == "async":
        rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource())
    elif name == "pool":
        rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(),
                                                                     initial_pool_size=2**33))
    elif name != "default":
        raise SystemExit(f"unknown allocator {name!r} (default, async, pool)")


def _synced(run):  # noqa: ANN001, ANN202 - a local helper
    import cupy

    def call():  # noqa: ANN202
        out = run()
        cupy.cuda.runtime.deviceSynchronize()  # queued kernels count to the op
        return out

    return call


def profile_one(allocator: str, table: str, rows: int, top: int) -> None:
    """Time and profile each op of ``table``'s recipe on cuDF under ``allocator``."""
    _set_allocator(allocator)
    from gpufeed.bench.tabular_ops import load_table, recipe_ops, table_file
    from gpufeed.gpu_transforms.tabular import Recipe

    frame = load_table(table_file(table, rows), "cudf")
    print(f"\n=== {table}, {len(frame):,} rows, allocator {allocator}", flush=True)
    for op in recipe_ops(table):
        name = f"{type(op).__name__} ({len(op.columns)} cols)"
        run = _synced(lambda op=op, frame=frame: Recipe([copy.deepcopy(op)]).fit_transform(frame))
        out = run()  # warm-up: JIT kernels, first allocations
        times = []
        for _ in range(3):
            start = time.perf_counter()
            out = run()
            times.append(time.perf_counter() - start)
        profiler = cProfile.Profile()
        profiler.enable()
        run()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
        body = text.getvalue()
        body = body[body.find("ncalls"):] if "ncalls" in body else body
        print(f"--- {name}: median {statistics.median(times) * 1e3:.1f} ms "
              f"(min {min(times) * 1e3:.1f}); cProfile's top {top} by own time:\n{body}", flush=True)
        frame = out


def main() -> int:
    """Each (allocator, table) in a child process; the profiles to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tables", default="sensor,transactions")
    parser.add_argument("--allocators", default="default,async,pool")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--one", nargs=2, metavar=("ALLOCATOR", "TABLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        profile_one(args.one[0], args.one[1], args.rows, args.top)
        return 0
    status = 0
    for allocator in args.allocators.split(","):
        for table in args.tables.split(","):
            done = subprocess.run([sys.executable, __file__, "--one", allocator, table, "--rows", str(args.rows),
                                   "--top", str(args.top)], check=False)
            if done.returncode:
                print(f"=== {table}, allocator {allocator}: exit {done.returncode}", flush=True)
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
