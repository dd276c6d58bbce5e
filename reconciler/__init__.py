"""reconcile: a declarative GitOps reconciler for digest-pinned services on a cluster mesh.

Layout (enforced by ``tests/test_layers.py``):

- ``reconciler.core``    pure: models, cross-checks, evidence rules, planning. No I/O.
- ``reconciler.render``  pure renderers over the plan value (text, JSON, Markdown).
- ``reconciler.shell``   I/O: loading files, the control-plane client, cluster probing,
                         observing, applying, watching.
- ``reconciler.engine``  the one place that sequences observe -> plan -> apply.
- ``reconciler.commands`` + ``reconciler.cli``  argument parsing and exit codes only.
- ``reconciler.sandbox`` the stand-in control plane and cluster mesh (a product of its own).
"""

__version__ = "0.1.0"
