"""Plugins: MCP servers an agent may use, one module a job (see docs/plugins.md).

tools.py lists a plugin's tools and calls them; link.py reaches a server (the guarded
client, the transports); sessions.py keeps one session per plugin per conversation;
stdio.py runs a plugin that is a command on this machine; prompts.py offers prompts and
resources to the composer; content.py converts a tool result's content; asks.py and
forms.py carry a server's questions to the person; oauth.py signs plugins in with OAuth,
whose tokens oauth_tokens.py keeps for every connection;
attempt.py records what one connection met; resume.py takes a call up after a restart;
errors.py holds PluginError, below every module that raises it.
"""
