"""CUDA-event timing shared by the PyTorch side of the benchmarks (bench/sdpa_side_by_side.py,
bench/doc_attention_side_by_side.py)."""
import time


def median_cuda_ms(torch, fn, warmup, reps, sustain_ms=0.0):
    """Median milliseconds of fn over reps runs, each timed with CUDA events on the current stream, after warmup
    untimed runs (compilation, e.g. FA4's or torch.compile's, happens there). With sustain_ms > 0, fn first runs back
    to back (synchronized each time) for that long, so the timed runs see the clock of sustained load."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start_s = time.perf_counter()
    while (time.perf_counter() - start_s) * 1e3 < sustain_ms:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]
