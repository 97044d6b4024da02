"""Profiling backends: cpu (host), nki (AWS Trainium), flashinfer (NVIDIA GPU)."""
