"""Benchmarks and bandwidth analysis: latency sweeps, a per-op byte/MAC cost model, rooflines."""
