"""Pieces shared by train/, profiling/ and analysis/: the MLflow run schema, user-facing errors,
command-line plumbing, and the modules that write runs to MLflow (tracking: the run session; spool:
runs kept on disk while the server is unreachable; upload: sending them later; server: which
tracking server, and whether it answers). Nothing here imports torch at import time (envinfo
imports it when asked for device facts)."""
