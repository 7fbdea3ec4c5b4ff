"""Widgets the window and its panels are built from."""
