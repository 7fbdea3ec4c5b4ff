"""The Hugging Face Hub: where its cache lives, what a repo holds, and fetching it.

* :mod:`~kvpilot.core.hub.cache`: the cache folder (one function, read at call time), repo ids,
  cached snapshots.
* :mod:`~kvpilot.core.hub.metadata`: a model's spec from the cache or from the Hub's metadata.
* :mod:`~kvpilot.core.hub.download`: resumable downloads of the files vLLM loads.
"""
