"""The roofline model: device ceilings, the intensity / bound / fraction-of-roof maths, the figure.

A leaf package: it imports only `common` (docs/architecture.md). train, profiling and analysis
import it.
"""
