"""``DURATION`` arguments (``apply --timeout``): ``90``, ``90s``, ``2m``, ``1m30s``, ``1h``.

Owns the parsing and its error message (an ``argparse`` type: a bad value is a usage
error, exit 64, naming what was given and what is accepted). Pure.
"""

from __future__ import annotations

import argparse
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def seconds(text: str) -> float:
    """``text`` as seconds: a plain number is seconds; else one or more NUMBER+UNIT parts
    (h, m, s, ms) in any order, summed. Must be more than 0 and finite."""
    value = text.strip().lower()
    total: float | None
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        total = float(value)
    elif _WHOLE.fullmatch(value):
        total = sum(float(n) * _UNIT[unit] for n, unit in _PART.findall(value))
    else:
        total = None
    if total is None or not 0 < total < 10**9:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: give seconds (90) or NUMBER+UNIT parts such as "
            "90s, 2m, 1m30s, 1h (units h, m, s, ms), more than 0")
    return total
