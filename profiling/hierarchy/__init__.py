"""The hierarchical roofline of a profile, one room: `table.py` (per kernel name and phase: FLOPs,
bytes and intensity at DRAM, L2 and L1, the ceiling that bounds each; pure pandas), `figure.py`
(the kernels drawn at the three levels under the roof's ceilings) and `log.py` (both logged with a
`profile` run). Analysis redraws the figure from the logged table (analysis/hierarchy.py: the
report's section); the limiter of one point is roofline.model's."""
