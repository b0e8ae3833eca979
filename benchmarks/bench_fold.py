"""Fold + classify throughput on generated logs (issue: query core).

Targets on a 2-core machine: 1M events with 1 % replacements in <= 1.0 s, and
linear growth (1M time / 100k time <= 12). Also reports peak RSS.

Run: python -m benchmarks.bench_fold [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time

from benchmarks.logs import generate_log
from gateway.core import fold_surface


def time_fold(log, repeat: int) -> tuple[float, int]:
    runs = []
    replacements = 0
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = fold_surface(log)
        result.classes()
        runs.append(time.perf_counter() - t0)
        replacements = len(result.replacements)
    return statistics.median(runs), replacements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median reported)")
    args = parser.parse_args()
    print(f"fold + classify (median of {args.repeat} runs)")
    print(f"{'events':>10} {'replace':>8} {'replacements':>13} {'seconds':>9} {'ns/event':>9}")
    medians: dict[tuple[int, float], float] = {}
    for ratio in (0.0, 0.01):
        for n in (100_000, 1_000_000):
            log = generate_log(n, ratio)
            seconds, replacements = time_fold(log, args.repeat)
            medians[(n, ratio)] = seconds
            per_event = seconds / n * 1e9
            print(f"{n:>10} {ratio:>8.0%} {replacements:>13} {seconds:>9.3f} {per_event:>9.0f}")
            del log
    one_m = medians[(1_000_000, 0.01)]
    growth = one_m / medians[(100_000, 0.01)]
    growth0 = medians[(1_000_000, 0.0)] / medians[(100_000, 0.0)]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print(f"1M events, 1% replacements: {one_m:.3f} s   (target <= 1.0 s)")
    print(f"growth 1M/100k, 1% replacements: {growth:.1f}x   (target <= 12x); 0%: {growth0:.1f}x")
    print(f"peak RSS (process, incl. the 1M-event log): {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
