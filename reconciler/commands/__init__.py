"""One module per CLI command: ``register(subparsers)`` adds its parser and handler.

Handlers parse nothing themselves beyond argparse, call the engine, pick a renderer,
write, and return an exit code from ``reconciler.exitcodes``.
"""
