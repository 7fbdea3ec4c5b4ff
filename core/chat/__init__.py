"""Talking to the served or attached model through its OpenAI chat-completions API.

- :mod:`.errors`: :class:`~kvpilot.core.chat.errors.ChatError`, the one typed error of a chat
  reply (context too long, refused key, server gone, timeout, unreadable stream), one sentence.
- :mod:`.sse`: the server-sent-events parser of a streamed reply (pure; garbage raises).
- :mod:`.client`: one streamed reply with its TTFT, tokens/s and token counts; stoppable.
- :mod:`.store`: the conversation of each profile, kept in the data directory.
- :mod:`.images`: whether the model takes images, and an image file as a ``data:`` URL.

No Qt here: the window's Chat tab (``kvpilot.gui.panels.chat_panel``) adapts these.
"""
