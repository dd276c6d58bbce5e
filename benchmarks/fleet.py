"""A generated fleet for the plan and apply benchmarks: a sandbox seed and a config repo.

``n`` services ``f0000…``, each with v1.0.0 accepted and running and v1.1.0 pushed but
never accepted; the repo pins v1.1.0 (``pin="new"``: every service is a promotion) or
v1.0.0 (``pin="current"``: nothing to change), with one egress destination each.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from reconciler.sandbox.launcher import Sandbox


def name(i: int) -> str:
    return f"f{i:04d}"


def digest(service: str, tag: str) -> str:
    return "sha256:" + hashlib.sha256(f"{service}:{tag}".encode()).hexdigest()


def seed(n: int) -> dict[str, Any]:
    return {"services": [{
        "id": f"svc-{name(i)}", "name": name(i),
        "egress": [{"host": "api.example.net", "port": 443}],
        "releases": [{"tag": "v1.0.0", "accepted": True}, {"tag": "v1.1.0"}],
        "current": "v1.0.0", "generation": 1,
    } for i in range(n)], "grants": []}


def write_seed(path: Path, n: int) -> Path:
    path.write_text(json.dumps(seed(n)))
    return path


def write_repo(root: Path, sandbox: Sandbox, n: int, *, pin: str,
               timeouts: tuple[float, float] | None = None, **policy: Any) -> Path:
    """The repo, committed. ``timeouts``: (controlPlane.timeoutSeconds,
    mesh.timeoutSeconds) instead of the defaults (10 s, 5 s)."""
    (root / "services").mkdir(parents=True)
    settings = json.loads(sandbox.settings_yaml(**policy))
    if timeouts is not None:
        settings["controlPlane"]["timeoutSeconds"], settings["mesh"]["timeoutSeconds"] = timeouts
    (root / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    tag = "v1.1.0" if pin == "new" else "v1.0.0"
    for i in range(n):
        svc = name(i)
        (root / "services" / f"{svc}.yaml").write_text(
            "apiVersion: reconcile/v1\nkind: Service\n"
            f"name: {svc}\nserviceId: svc-{svc}\nappId: {svc}\n"
            "release:\n  registryHost: registry.sandbox.test\n"
            f"  repository: shop/{svc}\n  digest: {digest(svc, tag)}\n  tag: {tag}\n"
            "egress:\n  - host: api.example.net\n")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.email=bench@example.net", "-c", "user.name=bench", "commit",
                  "-qm", "fleet"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root
