"""Renderers over the plan value: peers, pure, no I/O. The CLI picks one and writes."""
