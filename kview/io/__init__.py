"""Readers of trace files into the normalized model, and the frame cache."""
