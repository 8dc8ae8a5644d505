"""bench/timing.py - the timing loop the Python benchmarks share (imported, never run)."""
import time


def median_ms(fn, reps):
    """Median wall time of fn() in ms over reps calls, after one warm-up call."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]
