"""The chat's headless core: one conversation's turns (app.chat.session.ChatSession) with its
request assembly, context policy, tool loop and durability, and the events a front end shows.
The window (app.gui.chat_controller) and `ember chat` (app.cli.generate) both drive it; nothing
here imports Qt."""
