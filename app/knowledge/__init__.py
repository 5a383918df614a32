"""Reading documents into passages: a document's kind, its pages read in a child process under
limits, and each page's text cut into passages (docs/knowledge.md)."""
