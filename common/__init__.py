"""Pieces shared by train/, profiling/ and analysis/: the MLflow run schema, user-facing errors,
and the one module that writes runs to MLflow. Nothing here imports torch."""
