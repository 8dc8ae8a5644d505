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


def cuda_ms(torch, fn, iters):
    """Mean time of fn() on the current CUDA device in ms over iters calls, by CUDA events,
    after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters
