"""Fixed-iteration training benchmark of torchvision models (`python -m train`)."""
