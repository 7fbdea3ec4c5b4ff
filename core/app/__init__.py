"""One module per user action, shared by the command line, the window and autostart."""
