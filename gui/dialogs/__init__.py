"""The window's dialogs: settings, attach, benchmark, Hub search, install."""
