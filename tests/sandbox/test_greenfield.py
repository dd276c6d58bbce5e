"""Issue 12 on the sandbox side: getCapabilities, the preflight per seed 002 (12.0.0, fail
closed) driven by the registry simulation, and the [ext] greenfield creation."""

from __future__ import annotations

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient

pytestmark = pytest.mark.integration

GREENFIELD_METHODS = {"createGreenfieldDeployment", "getGreenfieldDeploymentOperation"}


def test_capabilities_list_every_method_answered(cp: ControlPlaneClient,
                                                 sandbox: Sandbox) -> None:
    methods = set(cp.ok("getCapabilities")["methods"])
    assert {"getCapabilities", "getServiceById", "getServices", "getDeploymentPreflight",
            "promoteServiceImageRelease", "setServiceEgress"} <= methods
    # Each listed method is answered (no unknown-method text), each unlisted one is not.
    for method in methods:
        reply = cp.call(method)
        assert reply.get("error", {}).get("text") != \
            "There is no available method for this call on the server side", method
    anonymous = cp.raw("getCapabilities", identity={"jwt": "sbxjwt.unknown"})
    assert anonymous["error"]["data"]["code"] == "UNAUTHORIZED"
