"""Models and the servers that answer them: the one home for model ids, catalogs and clients.

    ids.py       model ids ("local:NAME", "ACCOUNT:NAME", "NAME"), `Choice` rows
    catalog.py   what each server lists (OpenAI-style /models, Ollama's /api/tags and /api/show)
    thinking.py  thinking levels and the request fields for them
    client.py    `Providers`: where an id is answered, the model list, the streaming client
    servers.py   kinds of server: their window, slots and tokenizer; one request at a time
    asking.py    one request, streamed or short, and what its failures teach
    limits.py    what a model was found not to take (window, images, tools, reasoning), and what was learned
    wire.py      the Chat Completions stream's lines and chunks as our deltas; cache marks
    errors.py    what went wrong, in words a person reads
    embeddings.py  texts as vectors by a server's /v1/embeddings (knowledge search by meaning)
    builtin.py   the built-in model in the model list, while it is installed
    connections.py  model servers the owner added on the Connections page: kinds, a Test's words, id prefixes

Import from the module that holds a name (`from app.providers.client import Providers`):
this file imports nothing, so the row types can be read without the client's dependencies.
"""
