"""``reconcile freeze`` / ``unfreeze`` in words: what was frozen until when and why, what
was unfrozen, and whether the change is committed (a plan counts a freeze only once it
is committed, so the line always says which). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence


def _committed(made: str | None) -> str:
    return f"commit {made[:12]}" if made else "not committed"


def froze(names: Sequence[str], until: str | None, reason: str, rel: str,
          made: str | None) -> str:
    ends = f"until {until}" if until else "until `reconcile unfreeze`"
    return f"froze {', '.join(names)} {ends}: {reason} ({rel}, {_committed(made)})"


def unfroze(environment: str, touched: Sequence[str], made: str | None) -> str:
    if not touched:
        return f"{environment} is not frozen"
    return f"unfroze {environment}: {', '.join(touched)} ({_committed(made)})"
