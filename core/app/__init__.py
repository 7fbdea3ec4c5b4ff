"""The application layer: one function per user action, called alike by ``kvpilot``'s commands,
the window and autostart, which only parse, call and render.

Modules here sit above the domain packages (``fit``, ``hardware``, ``vllm``, ...) and import
them; nothing below imports this package.
"""
