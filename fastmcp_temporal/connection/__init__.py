"""The Temporal connection and the data converter every process of a task queue shares.

One place builds the converter (key order, encryption, the payload store and its
lost-payload stand-in), and one place connects a client from the settings,
Temporal's own configuration or the embedded dev server.
"""
