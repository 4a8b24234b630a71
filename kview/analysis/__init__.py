"""Analyses over the normalized trace: attribution, NVTX ranges and tree, layers and phases, compare, overview, filters."""
