"""The Temporal connection and the data converter every process of a task queue shares.

One place builds the converter (key order, encryption, the payload store and its
lost-payload stand-in), one place connects a client from the settings,
Temporal's own configuration or the embedded dev server, and one registers the
search attributes tasks are indexed by on whichever server that is.
"""
