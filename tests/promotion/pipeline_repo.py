"""A committed two-environment config repo (staging → prod), each environment pointing
at its own live sandbox, and a CLI runner for it.

The repo holds ``pipeline.yaml`` and ``environments/{staging,prod}/`` (each the reference
``checkout`` service with its own Settings: control plane, CA, gateway addresses,
clusters, and the token / signer-key variables of its own sandbox). No connection
override variable is set: each environment's Settings alone say where it is.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.sandbox import rollouts
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import EXAMPLES, Cli, git

OLD = rollouts.seeded_digest("checkout", "v2.3.0")  # what both sandboxes run at first
NEW = rollouts.seeded_digest("checkout", "v2.4.0")  # what the example pins

PIPELINE = """apiVersion: reconcile/v1
kind: Pipeline
environments:
  - name: staging
    path: environments/staging
  - name: prod
    path: environments/prod
    soak: {soak}
{windows}"""


@dataclass
class PipelineRepo(Cli):
    path: Path
    staging: Sandbox
    prod: Sandbox
    state: Path
    soak: str = "1h"
    windows: list[dict[str, Any]] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
        env.update({
            "RECONCILE_TOKEN": self.staging.token,
            "RECONCILE_SIGNER_KEY": str(self.staging.signer_key_file),
            "RECONCILE_TOKEN_PROD": self.prod.token,
            "RECONCILE_SIGNER_KEY_PROD": str(self.prod.signer_key_file),
            "RECONCILE_STATE_DIR": str(self.state),
            "NO_COLOR": "1",
        })
        env.update(extra)
        return env


    def service_file(self, env: str) -> Path:
        return self.path / "environments" / env / "services" / "checkout.yaml"

    def pin(self, env: str, digest: str, tag: str | None) -> None:
        """Point ``env``'s checkout at ``digest`` (and ``tag``), and commit."""
        path = self.service_file(env)
        lines = []
        for line in path.read_text().splitlines():
            if line.startswith("  digest: "):
                line = f"  digest: {digest}"
            elif line.startswith("  tag: "):
                if tag is None:
                    continue
                line = f"  tag: {tag}"
            lines.append(line)
        path.write_text("\n".join(lines) + "\n")
        self.commit(f"{env}: checkout at {digest}")

    def write_pipeline(self, soak: str | None = None,
                       windows: list[dict[str, Any]] | None = None) -> None:
        if soak is not None:
            self.soak = soak
        if windows is not None:
            self.windows = windows
        shown = ("    windows: " + json.dumps(self.windows) + "\n") if self.windows else ""
        (self.path / "pipeline.yaml").write_text(PIPELINE.format(soak=self.soak,
                                                                 windows=shown))


def _environment(root: Path, sandbox: Sandbox, suffix: str) -> None:
    root.mkdir(parents=True)
    (root / "services").mkdir()
    shutil.copy(EXAMPLES / "services" / "checkout.yaml", root / "services" / "checkout.yaml")
    settings = json.loads(sandbox.settings_yaml(interval_seconds=0.2, attempts=60))
    settings["controlPlane"]["tokenEnv"] = "RECONCILE_TOKEN" + suffix
    settings["mesh"]["signer"]["keyFileEnv"] = "RECONCILE_SIGNER_KEY" + suffix
    (root / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")


def make_pipeline_repo(tmp: Path, staging: Sandbox, prod: Sandbox, *, soak: str = "1h",
                       windows: list[dict[str, Any]] | None = None) -> PipelineRepo:
    path = tmp / "config"
    path.mkdir()
    _environment(path / "environments" / "staging", staging, "")
    _environment(path / "environments" / "prod", prod, "_PROD")
    repo = PipelineRepo(path, staging, prod, tmp / "apply-state", soak, list(windows or []))
    repo.write_pipeline()
    git(path, "init", "-q")
    repo.commit("two environments")
    return repo
