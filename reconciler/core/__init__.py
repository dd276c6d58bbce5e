"""The pure core: models, cross-document rules, evidence rules and planning.

Nothing under this package may import an I/O library (httpx, ruamel, watchfiles,
sqlite3, socket, subprocess, ...); ``tests/test_layers.py`` fails if one does.
"""
