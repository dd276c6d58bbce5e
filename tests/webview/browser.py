"""A real headless Chromium for the web view's tests: Debian's ``chromium`` driven by
Playwright (the ``test`` extra) through ``executable_path`` -- Playwright's own browsers
are never downloaded. A missing browser or driver FAILS the test, saying how to install
it: the view is not tested by skipping it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium(tmp: Path, **options: Any) -> Iterator[Any]:
    """A persistent context in a fresh user-data directory under ``tmp``."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail(f"{CHROMIUM} is missing: the web view is tested in a real browser; "
                    "install it with `make system-deps` (Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: install the test extra "
                    "(`.venv/bin/pip install -e '.[test]'`); no browser is downloaded")
    profile = tmp / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM if Path(CHROMIUM).exists()
            else shutil.which("chromium"), headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900}, **options)
        try:
            yield context
        finally:
            context.close()
