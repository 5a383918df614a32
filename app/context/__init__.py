"""What of a conversation a model is sent: its items as model messages in segments (segments.py), cut to the window (window.py)."""
