"""One OpenAI-compatible address in front of several profiles on one GPU.

:mod:`.sleep` says when a runtime and a platform allow vLLM's sleep mode and speaks its endpoints,
:mod:`.placement` decides from the planner which profiles run side by side and with what memory
share, :mod:`.pool` starts, stops, puts to sleep and wakes the profiles' servers (each a
supervised ``vllm serve``) and keeps a run record of every swap, and :mod:`.proxy` is the ASGI
application that routes each request by its ``model`` to the server of that profile.
"""
