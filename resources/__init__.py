"""Bundled data: model catalog, GPU specs, icons."""
