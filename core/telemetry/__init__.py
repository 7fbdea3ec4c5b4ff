"""Live telemetry: vLLM /metrics and NVML samples on one timeline."""
