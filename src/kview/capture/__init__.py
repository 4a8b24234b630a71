"""Capture: run a workload under Nsight Systems or torch.profiler and write a trace."""
