"""The vocabulary under every layer: the vLLM release table, the plan, capacity and serving
types, the model spec, units, errors, failures and paths. Imports nothing of kvpilot."""
