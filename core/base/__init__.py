"""The vocabulary under every layer: the vLLM release table, the plan, capacity and serving
types, the model spec, the user's goal (the fit engine, the settings profiles, both faces and
the window's records name it), units, errors, failures and paths. Imports nothing of kvpilot."""
