"""The vocabulary under every layer: the vLLM release table, the plan, capacity and serving
types, the model spec, the user's goal, a server's states and start-up phases, units, errors,
failures and paths (the domains, the application layer, both faces and the window's panels name
them). Imports nothing of kvpilot."""
