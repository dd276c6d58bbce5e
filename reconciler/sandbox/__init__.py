"""The sandbox: a real control plane and cluster mesh on one machine (issue 3).

Owns the server side of ``CONTRACT.md`` for local use: the TypedRequest control plane
(``controlplane``, durable SQLite state in ``store``), the clusters (``cluster``), the
certificates and signer key they need (``pki``), run-time faults (``faults``), the rollout
rules shared by both (``rollouts``), the seed (``seeding``) and the process supervisor
(``launcher``). Everything binds to 127.0.0.0/8.

It must not import the reconciler's client side (``reconciler.shell``, the engine or the
commands): the sandbox stands in for systems the reconciler does not own, and sharing code
with the client would let a bug on one side hide the same bug on the other.
"""

#: The loopback ports ``reconcile sandbox up`` asks for (the launcher's defaults): here so
#: that the command's parser names them without loading the servers' code.
DEFAULT_PORT = 18443
DEFAULT_MESH_PORT = 18444
