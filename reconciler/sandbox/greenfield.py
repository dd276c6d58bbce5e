"""New services through the control plane: the greenfield preflight and the [ext] creation.

Owns three TypedRequest methods of the sandbox's control plane:

- ``getDeploymentPreflight`` (seed 002): gathers what the control plane knows (grants, the
  service if it exists, the namespaces in use or left dirty, the versions released, the
  registry's index and published evidence) into ``preflight.Facts`` and returns the report.
  Read-only: it writes nothing (the dispatcher's audit row is the only trace).
- ``createGreenfieldDeployment`` **[ext]**: upstream defines the operation record
  (``IGreenfieldDeploymentOperation``) but no request that starts one; this is that request
  (docs/extensions.md). It checks the capability, the idempotency key, re-runs the
  preflight (NO-GO → ``PREFLIGHT_NO_GO``), checks the fence against it, then creates the
  service, its accepted release, a generation-1 rollout plan to every cluster (the clusters
  converge asynchronously through their sync loop) and the operation record, ``reserved``.
- ``getGreenfieldDeploymentOperation`` **[ext]**: the operation, its state derived from the
  service's rollout (``derive_state``).

With the switch off (``--no-greenfield``) the two [ext] methods are not in the table at
all (the unknown-method text, absent from getCapabilities) and the preflight says
``GREENFIELD_EXECUTION_UNAVAILABLE``.

Runs inside the dispatcher's transaction; errors are the control plane's domain errors
(injected, as ``batchreads`` does, so this module does not import ``controlplane``).
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from reconciler.sandbox import preflight, registry, rollouts, seeding, store
from reconciler.sandbox.callers import Authenticating, Caller

JsonDict = dict[str, Any]
Method = Callable[[sqlite3.Connection, JsonDict], JsonDict]

CREATE = "createGreenfieldDeployment"
GET_OPERATION = "getGreenfieldDeploymentOperation"
FENCE_KEYS = ("sourceServiceId", "sourceRevision", "version", "ociIndexDigest",
              "configurationDigest", "targetNamespace")
#: States an operation never leaves once reached (a later rollout is the service's story).
TERMINAL = frozenset({"promoted", "failed", "rolled-back"})


class Plane(Authenticating, Protocol):
    """What this module needs from the control plane: who calls, and the rest below."""
    def replay(self, conn: sqlite3.Connection, method: str, req: JsonDict,
               key: str) -> tuple[str, JsonDict | None]: ...

    def remember(self, conn: sqlite3.Connection, method: str, key: str, digest: str,
                 response: JsonDict) -> None: ...

    def egress_from(self, value: object) -> list[JsonDict]: ...

    def configuration_salt(self) -> str | None: ...


ErrorFactory = Callable[..., Exception]


def namespace_of(service: JsonDict) -> str:
    """The namespace a service occupies: ``data.namespace``, or its name when unset."""
    data = service["data"]
    return str(data.get("namespace") or data["name"])


def app_id_of(service: JsonDict) -> str:
    data = service["data"]
    return str(data.get("appId") or data["name"])


def workspace(conn: sqlite3.Connection) -> str:
    """The control plane's workspace identity: fixed for a sandbox state, random across
    them, so no client can know it (or a configuration digest over it) without asking."""
    return "ws-" + str(store.get_meta(conn, store.STATE_INSTANCE, "unknown"))


def released_versions(conn: sqlite3.Connection, service_id: str) -> frozenset[str]:
    """Versions released for ``service_id``: a release's recorded version, or the version
    its tags name (``v1.2.3`` → ``1.2.3``)."""
    versions: set[str] = set()
    for release in store.load_releases(conn, service_id):
        data = release["data"]
        if data.get("version"):
            versions.add(str(data["version"]))
        versions.update(v for v in map(registry.version_of, data.get("observedTags", []))
                        if v is not None)
    return frozenset(versions)


def derive_state(status: JsonDict) -> tuple[str, str | None]:
    """The operation state a rollout status shows, and a failure code when failed.

    The sandbox has no traffic route apart from the rollout: a cluster serves the digest
    once it runs it. So every replica verified on every cluster is ``promoted``;
    ``ready-for-promotion`` and ``promoting`` are passed in the same step and never seen.
    """
    name = status["status"]
    if name == "pending":
        return "provisioning", None  # the plan is issued; no cluster has reported yet
    if name in ("failed", "mismatched"):
        return "failed", str(status.get("mismatchReason") or name)
    return {"deploying": "deploying", "verifying": "verifying", "succeeded": "promoted",
            "rolling-back": "rolling-back", "rolled-back": "rolled-back"}.get(
        name, "verifying"), None


class Greenfield:
    """The three methods, over the control plane's connection and rules."""

    def __init__(self, plane: Plane, error: ErrorFactory, *, enabled: bool) -> None:
        self.plane = plane
        self.error = error
        self.enabled = enabled

    def methods(self) -> dict[str, Method]:
        """The [ext] methods to add to the handler table (none when switched off)."""
        if not self.enabled:
            return {}
        return {CREATE: self.create, GET_OPERATION: self.get_operation}

    # -- preflight ----------------------------------------------------------------------

    def facts(self, conn: sqlite3.Connection, req: JsonDict, caller: Caller) -> preflight.Facts:
        raw_id = req.get("serviceId")
        service_id = raw_id if isinstance(raw_id, str) and raw_id else None
        caps = store.capabilities(conn, caller.user_id, service_id) if service_id else []
        service = store.load_service(conn, service_id) if service_id else None
        status = None
        if service is not None and service["data"].get("imageDeployment"):
            status = rollouts.aggregate(service["data"]["imageDeployment"],
                                        store.load_reports(conn, service["id"]))
        namespace = req.get("proposedNamespace")
        owner = None
        if isinstance(namespace, str):
            owner = next((s["id"] for s in store.all_services(conn)
                          if s["id"] != service_id and namespace_of(s) == namespace), None)
        raw_digest = req.get("ociIndexDigest")
        digest = (preflight.normalize_sha256_digest(raw_digest)
                  if isinstance(raw_digest, str) else None)
        index = registry.find(conn, digest) if digest else None
        manifest = registry.find_manifest(conn, digest) if digest and index is None else None
        tag = req.get("releaseTag")
        return preflight.Facts(
            preflight_granted=caller.admin or preflight.PREFLIGHT in caps,
            create_granted=caller.admin or preflight.CREATE_GREENFIELD in caps,
            caller=caller.user_id,
            service=service,
            rollout_status=status,
            namespace_owner=owner,
            namespace_dirty=isinstance(namespace, str)
            and namespace in seeding.dirty_namespaces(conn),
            released_versions=released_versions(conn, service_id) if service_id else frozenset(),
            index=index,
            tag_digest=(store.tag_digest(conn, index["repository"], tag)
                        if index is not None and isinstance(tag, str) else None),
            greenfield_execution=self.enabled,
            workspace=workspace(conn),
            manifest=manifest,
            configuration_salt=self.plane.configuration_salt())

    def report(self, conn: sqlite3.Connection, req: JsonDict, caller: Caller) -> JsonDict:
        request = {k: v for k, v in req.items() if k != "identity"}
        return preflight.report(request, self.facts(conn, request, caller), now=store.now_ms())

    def preflight(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """``getDeploymentPreflight``: the report; never a write."""
        caller = self.plane.caller(conn, req)
        return {"report": self.report(conn, req, caller)}

    # -- creation -----------------------------------------------------------------------

    def _text(self, value: object, field: str, *, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            raise self.error("INVALID_REQUEST", f"{field} must be a non-empty string",
                             field=field)
        return value

    def _inputs(self, req: JsonDict) -> tuple[str, JsonDict, JsonDict, JsonDict]:
        key = self._text(req.get("idempotencyKey"), "idempotencyKey")
        assert key is not None
        pre, fence, service = req.get("preflight"), req.get("fence"), req.get("service")
        for name, value in (("preflight", pre), ("fence", fence), ("service", service)):
            if not isinstance(value, dict):
                raise self.error("INVALID_REQUEST", f"{name} must be an object", field=name)
        assert isinstance(pre, dict) and isinstance(fence, dict) and isinstance(service, dict)
        self._text(pre.get("serviceId"), "preflight.serviceId")
        for name in ("name", "appId", "registryHost", "repository"):
            self._text(service.get(name), f"service.{name}")
        self._text(service.get("releaseTag"), "service.releaseTag", optional=True)
        return key, pre, fence, service

    def create(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """[ext] ``createGreenfieldDeployment`` (see the module docstring)."""
        key, pre, fence, wanted = self._inputs(req)
        egress = self.plane.egress_from(wanted.get("egress", []))
        caller = self.plane.caller(conn, req)
        service_id = str(pre["serviceId"])
        if not caller.admin and preflight.CREATE_GREENFIELD not in store.capabilities(
                conn, caller.user_id, service_id):
            raise self.error("FORBIDDEN",
                             f"{caller.user_id} lacks {preflight.CREATE_GREENFIELD} on "
                             f"{service_id}", capability=preflight.CREATE_GREENFIELD,
                             serviceId=service_id)
        digest, previous = self.plane.replay(conn, CREATE, req, key)
        if previous is not None:
            # The same operation, as it stands now; nothing changes.
            found = store.load_operation(conn, idempotency_key=key)
            assert found is not None
            return {"operation": self.refresh(conn, *found), "idempotentReplay": True}
        if store.load_service(conn, service_id) is not None:
            raise self.error("WOULD_REPLACE_EXISTING_STATE",
                             f"service {service_id} already exists; a greenfield deployment "
                             "would replace it", serviceId=service_id)
        report = self.report(conn, pre, caller)
        if report["decision"] != "GO":
            codes = sorted({b["code"] for b in report["compatibilityBlockers"]})
            raise self.error("PREFLIGHT_NO_GO",
                             f"the preflight of {service_id} is NO-GO: {', '.join(codes)}",
                             blockers=report["compatibilityBlockers"])
        expected = {"sourceServiceId": service_id,
                    "sourceRevision": report["source"]["revision"],
                    "version": report["source"]["version"],
                    "ociIndexDigest": report["requestedImage"]["digest"],
                    "configurationDigest": report["source"]["configurationDigest"],
                    "targetNamespace": report["proposed"]["namespace"]}
        actual = {k: fence.get(k) for k in FENCE_KEYS}
        if actual != expected or set(fence) - set(FENCE_KEYS):
            differ = [k for k in FENCE_KEYS if actual[k] != expected[k]] or \
                sorted(set(fence) - set(FENCE_KEYS))
            raise self.error("FENCE_MISMATCH",
                             f"the fence differs from the preflight's in {', '.join(differ)}",
                             expected=expected, actual=fence)
        return self._create(conn, key=key, digest=digest, req=req, fence=expected,
                            wanted=wanted, egress=egress)

    def _create(self, conn: sqlite3.Connection, *, key: str, digest: str, req: JsonDict,
                fence: JsonDict, wanted: JsonDict, egress: list[JsonDict]) -> JsonDict:
        service_id = fence["sourceServiceId"]
        name, app_id = str(wanted["name"]), str(wanted["appId"])
        index = registry.find(conn, fence["ociIndexDigest"])
        assert index is not None  # the preflight was GO, so the registry holds it
        if (wanted["registryHost"], wanted["repository"]) != (index["registryHost"],
                                                              index["repository"]):
            raise self.error(
                "INVALID_REQUEST",
                f"{wanted['registryHost']}/{wanted['repository']} does not hold "
                f"{fence['ociIndexDigest']}; the registry has it in "
                f"{index['registryHost']}/{index['repository']}", field="service.repository")
        for other in store.all_services(conn):
            if other["data"]["name"] == name or app_id_of(other) == app_id:
                raise self.error("INVALID_REQUEST",
                                 f"service {other['id']} already has the name {name} or the "
                                 f"appId {app_id}", field="service.name")
        now = store.now_ms()
        tag = wanted.get("releaseTag") or req["preflight"].get("releaseTag")
        tag = tag if isinstance(tag, str) else None
        release_id = f"rel-{name}-{tag or fence['ociIndexDigest'][7:19]}"
        if store.load_release(conn, release_id) is not None:
            release_id += "-" + secrets.token_hex(4)
        release = registry.release_record(
            service_id=service_id, name=name, repository=index["repository"],
            registry_host=index["registryHost"], media_type=index["mediaType"],
            tag=tag or "", digest=fence["ociIndexDigest"], release_id=release_id, at=now)
        release["data"].update(observedTags=[tag] if tag else [], version=fence["version"],
                               acceptedAt=now, lastPromotedAt=now, promotionCount=1)
        store.save_release(conn, release)
        rollout_id = f"rollout-{secrets.token_hex(8)}"
        plan = rollouts.new_plan(release=release, rollout_id=rollout_id, generation=1,
                                 created_at=now, mode="promotion", clusters=store.clusters(conn))
        proposed = req["preflight"].get("proposedCorestoreResources") or []
        store.save_service(conn, {"id": service_id, "data": {
            "name": name, "appId": app_id, "namespace": fence["targetNamespace"],
            "imageId": f"img-{name}", "imageVersion": tag or fence["ociIndexDigest"],
            "immutableImageRequired": True, "egress": egress,
            "egressRevision": 1 if egress else 0, "corestoreResources": proposed,
            "imageDeployment": plan}})
        store.bump_version(conn)
        operation = {"id": f"gfop-{secrets.token_hex(8)}", "data": {
            "idempotencyKey": key,
            "requestDigest": "sha256:" + store.sha256_hex(store.canonical(
                {k: v for k, v in req.items() if k != "identity"})),
            "fence": fence, "candidateServiceId": service_id, "state": "reserved",
            "createdAt": now, "updatedAt": now}}
        store.save_operation(conn, operation, service_id=service_id, rollout_id=rollout_id)
        response = {"operation": operation}
        self.plane.remember(conn, CREATE, key, digest, response)
        return response

    # -- the operation --------------------------------------------------------------------

    def refresh(self, conn: sqlite3.Connection, operation: JsonDict, service_id: str,
                rollout_id: str) -> JsonDict:
        """The operation with its state derived from the service's rollout now (saved when
        it moved; a terminal state is kept)."""
        data = operation["data"]
        if data["state"] in TERMINAL:
            return operation
        service = store.load_service(conn, service_id)
        plan = (service or {"data": {}})["data"].get("imageDeployment") or {}
        if plan.get("rolloutId") == rollout_id or plan.get("rollbackOfRolloutId") == rollout_id:
            state, failure = derive_state(
                rollouts.aggregate(plan, store.load_reports(conn, service_id)))
        else:
            # Another rollout replaced this one before it finished.
            state, failure = "failed", "SUPERSEDED"
        if state != data["state"] or failure != data.get("failureCode"):
            data["state"] = state
            data["updatedAt"] = store.now_ms()
            if failure is not None:
                data["failureCode"] = failure
            if state == "promoted":
                data["routeGeneration"] = int(plan["rolloutGeneration"])
            store.save_operation(conn, operation, service_id=service_id, rollout_id=rollout_id)
        return operation

    def refresh_service(self, conn: sqlite3.Connection, service_id: str) -> None:
        """Advance the operations of ``service_id`` (after a cluster report or before its
        rollout is replaced), so a state reached is recorded even if nobody asked."""
        for operation_id in store.operation_ids_of(conn, service_id):
            found = store.load_operation(conn, operation_id=operation_id)
            if found is not None:
                self.refresh(conn, *found)

    def get_operation(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """[ext] ``getGreenfieldDeploymentOperation`` by ``operationId`` or
        ``idempotencyKey``."""
        caller = self.plane.caller(conn, req)
        operation_id = self._text(req.get("operationId"), "operationId", optional=True)
        key = self._text(req.get("idempotencyKey"), "idempotencyKey", optional=True)
        if operation_id is None and key is None:
            raise self.error("INVALID_REQUEST", "operationId or idempotencyKey is required",
                             field="operationId")
        found = store.load_operation(conn, operation_id=operation_id, idempotency_key=key)
        if found is None or (key is not None and found[0]["data"]["idempotencyKey"] != key):
            raise self.error("OPERATION_NOT_FOUND", "no greenfield operation "
                             + (operation_id or f"with idempotencyKey {key}"),
                             operationId=operation_id, idempotencyKey=key)
        _, service_id, _ = found
        caps = store.capabilities(conn, caller.user_id, service_id)
        if not caller.admin and not {preflight.CREATE_GREENFIELD, preflight.PREFLIGHT} & set(caps):
            raise self.error("FORBIDDEN", f"{caller.user_id} lacks "
                             f"{preflight.CREATE_GREENFIELD} on {service_id}",
                             capability=preflight.CREATE_GREENFIELD, serviceId=service_id)
        return {"operation": self.refresh(conn, *found)}
