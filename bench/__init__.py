"""Side-by-side benchmarks of the tool's own overheads, each run from the repository root as
`python -m bench.<name>` (bench.overhead, bench.tracking_cost, bench.analysis_scale, ...)."""
