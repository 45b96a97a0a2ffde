"""Performance stage: start an engine, drive load at fixed concurrency levels, summarize latencies."""
