"""Workloads in plain PyTorch, annotated with NVTX ranges named as in the seed documents."""
