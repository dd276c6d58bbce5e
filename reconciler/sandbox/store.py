"""The control plane's durable state: one SQLite database in WAL mode.

Owns the schema (services, releases, per-reporter rollout reports, grants, users, machine
tokens and sessions stored as SHA-256 hashes, idempotency keys with the payload hash and
the stored response, the audit log, the simulated registry's indexes and tags, greenfield
operations, gateway routes (``gateway``'s rows), and a few meta values) and the transaction helper.
Every request runs in one ``BEGIN IMMEDIATE`` transaction, so writers are serialised by
SQLite itself: two promotions racing on one generation cannot both pass the
compare-and-swap, and a reply is only sent after its transaction committed (WAL,
``synchronous=NORMAL``: a committed transaction survives the process being killed).

Must not know the TypedRequest envelope or HTTP: ``controlplane`` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DB_FILE = "control-plane.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS services (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    id TEXT PRIMARY KEY, service_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS releases_by_service ON releases (service_id, seq);
CREATE INDEX IF NOT EXISTS releases_by_seq ON releases (seq);
CREATE TABLE IF NOT EXISTS reports (
    service_id TEXT NOT NULL, reporter_id TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (service_id, reporter_id));
CREATE TABLE IF NOT EXISTS grants (
    user_id TEXT NOT NULL, service_id TEXT NOT NULL, capabilities TEXT NOT NULL,
    PRIMARY KEY (user_id, service_id));
CREATE TABLE IF NOT EXISTS users (
    user_id TEXT PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, role TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (token_hash TEXT PRIMARY KEY, user_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    jwt_hash TEXT PRIMARY KEY, user_id TEXT NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, method TEXT NOT NULL, payload_hash TEXT NOT NULL,
    response TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS registry_indexes (
    repository TEXT NOT NULL, digest TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (repository, digest));
CREATE INDEX IF NOT EXISTS registry_by_digest ON registry_indexes (digest, seq);
CREATE INDEX IF NOT EXISTS registry_by_seq ON registry_indexes (seq);
CREATE TABLE IF NOT EXISTS registry_tags (
    repository TEXT NOT NULL, tag TEXT NOT NULL, digest TEXT NOT NULL,
    PRIMARY KEY (repository, tag));
CREATE TABLE IF NOT EXISTS greenfield_operations (
    id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE, service_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS operations_by_service ON greenfield_operations (service_id);
CREATE TABLE IF NOT EXISTS gateway_routes (
    app_id TEXT NOT NULL, hostname TEXT NOT NULL, route_ref TEXT NOT NULL,
    client_id TEXT NOT NULL, data TEXT NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (app_id, hostname, route_ref));
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, source TEXT NOT NULL,
    method TEXT NOT NULL, fields TEXT NOT NULL, result TEXT NOT NULL);
"""

JsonDict = dict[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def connect(state_dir: Path) -> sqlite3.Connection:
    """A connection in autocommit mode; transactions are explicit (``transaction``)."""
    conn = sqlite3.connect(
        state_dir / DB_FILE, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def initialise(conn: sqlite3.Connection) -> None:
    with transaction(conn):
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        _install_state_revision(conn)


#: [ext] The tables the revisioned read methods (getServices, getServicesReleases,
#: getServiceDeploymentGrants) show, each with the column holding its content. Any row
#: inserted, deleted, or updated to a different value moves the one global state revision
#: (their ETag); an update that writes the same value does not. A new table whose rows
#: those methods show belongs here.
REVISED_TABLES: dict[str, str] = {
    "services": "data", "releases": "data", "reports": "data", "grants": "capabilities",
    # Not shown by those methods, but a client that keeps the routes it read after an
    # etag may reuse them on a notModified for it (docs/extensions.md §5).
    "gateway_routes": "data"}
STATE_REVISION = "state-revision"
STATE_INSTANCE = "state-instance"


def _install_state_revision(conn: sqlite3.Connection) -> None:
    # Triggers, not calls in each writer: no write path (seed, push, sync, a method
    # added later) can forget to move the revision. Their bodies hold ';', so they
    # cannot live in SCHEMA (split on ';').
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, '0')", (STATE_REVISION,))
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                 (STATE_INSTANCE, hashlib.sha256(os.urandom(16)).hexdigest()[:12]))
    bump = (f"UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
            f"WHERE key = '{STATE_REVISION}';")
    for table, column in REVISED_TABLES.items():
        conn.execute(f"CREATE TRIGGER IF NOT EXISTS rev_{table}_ins AFTER INSERT ON {table} "
                     f"BEGIN {bump} END")
        conn.execute(f"CREATE TRIGGER IF NOT EXISTS rev_{table}_del AFTER DELETE ON {table} "
                     f"BEGIN {bump} END")
        conn.execute(f"CREATE TRIGGER IF NOT EXISTS rev_{table}_upd AFTER UPDATE ON {table} "
                     f"WHEN OLD.{column} IS NOT NEW.{column} BEGIN {bump} END")


def state_revision(conn: sqlite3.Connection) -> str:
    """[ext] The control plane's state revision as an opaque ETag: this database's
    instance id (a new state directory never reuses an old ETag) and the counter."""
    row = conn.execute("SELECT (SELECT value FROM meta WHERE key = ?), "
                       "(SELECT value FROM meta WHERE key = ?)",
                       (STATE_INSTANCE, STATE_REVISION)).fetchone()
    return f"{row[0] or 'none'}.{row[1] or 0}"


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_meta(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return str(row[0]) if row else default


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


def bump_version(conn: sqlite3.Connection) -> int:
    """Clusters poll this counter: it moves whenever a desired state they follow changes."""
    version = int(get_meta(conn, "version", "0") or 0) + 1
    set_meta(conn, "version", str(version))
    return version


def clusters(conn: sqlite3.Connection) -> list[str]:
    return list(json.loads(get_meta(conn, "clusters", "[]") or "[]"))


def load_service(conn: sqlite3.Connection, service_id: str) -> JsonDict | None:
    row = conn.execute("SELECT data FROM services WHERE id = ?", (service_id,)).fetchone()
    return None if row is None else {"id": service_id, "data": json.loads(row[0])}


def save_service(conn: sqlite3.Connection, service: JsonDict) -> None:
    conn.execute("INSERT INTO services (id, data) VALUES (?, ?) "
                 "ON CONFLICT (id) DO UPDATE SET data = excluded.data",
                 (service["id"], canonical(service["data"])))


def all_services(conn: sqlite3.Connection) -> list[JsonDict]:
    rows = conn.execute("SELECT id, data FROM services ORDER BY id").fetchall()
    return [{"id": r[0], "data": json.loads(r[1])} for r in rows]


def load_releases(conn: sqlite3.Connection, service_id: str) -> list[JsonDict]:
    rows = conn.execute("SELECT id, data FROM releases WHERE service_id = ? ORDER BY seq",
                        (service_id,)).fetchall()
    return [{"id": r[0], "data": json.loads(r[1])} for r in rows]


def load_release(conn: sqlite3.Connection, release_id: str) -> JsonDict | None:
    row = conn.execute("SELECT data FROM releases WHERE id = ?", (release_id,)).fetchone()
    return None if row is None else {"id": release_id, "data": json.loads(row[0])}


def save_release(conn: sqlite3.Connection, release: JsonDict) -> None:
    row = conn.execute("SELECT seq FROM releases WHERE id = ?", (release["id"],)).fetchone()
    if row is None:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM releases").fetchone()[0]
        conn.execute("INSERT INTO releases (id, service_id, seq, data) VALUES (?, ?, ?, ?)",
                     (release["id"], release["data"]["serviceId"], seq,
                      canonical(release["data"])))
    else:
        conn.execute("UPDATE releases SET data = ? WHERE id = ?",
                     (canonical(release["data"]), release["id"]))


def load_reports(conn: sqlite3.Connection, service_id: str) -> list[JsonDict]:
    rows = conn.execute("SELECT data FROM reports WHERE service_id = ? ORDER BY reporter_id",
                        (service_id,)).fetchall()
    return [json.loads(r[0]) for r in rows]


def save_report(conn: sqlite3.Connection, service_id: str, report: JsonDict) -> bool:
    """Store the latest report of a reporter; True when it differs from the stored one."""
    data = canonical(report)
    row = conn.execute("SELECT data FROM reports WHERE service_id = ? AND reporter_id = ?",
                       (service_id, report["reporterId"])).fetchone()
    if row is not None:
        old = json.loads(row[0])
        old.pop("reportedAt", None)
        old.pop("reportSequence", None)
        new = {k: v for k, v in report.items() if k not in ("reportedAt", "reportSequence")}
        if old == new:
            return False
    conn.execute("INSERT INTO reports (service_id, reporter_id, data) VALUES (?, ?, ?) "
                 "ON CONFLICT (service_id, reporter_id) DO UPDATE SET data = excluded.data",
                 (service_id, report["reporterId"], data))
    return True


def grants(conn: sqlite3.Connection) -> list[JsonDict]:
    rows = conn.execute(
        "SELECT user_id, service_id, capabilities FROM grants ORDER BY user_id, service_id"
    ).fetchall()
    return [{"userId": r[0], "serviceId": r[1], "capabilities": json.loads(r[2])} for r in rows]


def capabilities(conn: sqlite3.Connection, user_id: str, service_id: str) -> list[str]:
    row = conn.execute("SELECT capabilities FROM grants WHERE user_id = ? AND service_id = ?",
                       (user_id, service_id)).fetchone()
    return [] if row is None else list(json.loads(row[0]))


def set_grant(conn: sqlite3.Connection, user_id: str, service_id: str, caps: list[str]) -> None:
    if caps:
        conn.execute("INSERT INTO grants (user_id, service_id, capabilities) VALUES (?, ?, ?) "
                     "ON CONFLICT (user_id, service_id) DO UPDATE "
                     "SET capabilities = excluded.capabilities",
                     (user_id, service_id, json.dumps(caps)))
    else:
        conn.execute("DELETE FROM grants WHERE user_id = ? AND service_id = ?",
                     (user_id, service_id))


def audit(conn: sqlite3.Connection, source: str, method: str, fields: JsonDict,
          result: str) -> None:
    conn.execute("INSERT INTO audit (at, source, method, fields, result) VALUES (?, ?, ?, ?, ?)",
                 (now_ms(), source, method, canonical(fields), result))


def read_audit(state_dir: Path, source: str = "control-plane") -> list[JsonDict]:
    conn = connect(state_dir)
    try:
        rows = conn.execute(
            "SELECT seq, at, method, fields, result FROM audit WHERE source = ? ORDER BY seq",
            (source,)).fetchall()
    finally:
        conn.close()
    return [{"seq": r[0], "at": r[1], "method": r[2], **json.loads(r[3]), "result": r[4]}
            for r in rows]


# -- the registry simulation and greenfield operations (``registry``, ``greenfield``) ------


def save_index(conn: sqlite3.Connection, index: JsonDict) -> None:
    """Store an OCI index a repository holds (replacing one with the same digest there)."""
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM registry_indexes").fetchone()[0]
    conn.execute("INSERT INTO registry_indexes (repository, digest, seq, data) "
                 "VALUES (?, ?, ?, ?) ON CONFLICT (repository, digest) DO UPDATE "
                 "SET data = excluded.data",
                 (index["repository"], index["digest"], seq, canonical(index)))


def indexes_by_digest(conn: sqlite3.Connection, digest: str) -> list[JsonDict]:
    """Every repository's index with ``digest``, oldest push first."""
    rows = conn.execute("SELECT data FROM registry_indexes WHERE digest = ? ORDER BY seq",
                        (digest,)).fetchall()
    return [json.loads(r[0]) for r in rows]


def tag_digest(conn: sqlite3.Connection, repository: str, tag: str) -> str | None:
    row = conn.execute("SELECT digest FROM registry_tags WHERE repository = ? AND tag = ?",
                       (repository, tag)).fetchone()
    return None if row is None else str(row[0])


def set_tag(conn: sqlite3.Connection, repository: str, tag: str, digest: str) -> None:
    conn.execute("INSERT INTO registry_tags (repository, tag, digest) VALUES (?, ?, ?) "
                 "ON CONFLICT (repository, tag) DO UPDATE SET digest = excluded.digest",
                 (repository, tag, digest))


def save_operation(conn: sqlite3.Connection, operation: JsonDict, *, service_id: str,
                   rollout_id: str) -> None:
    conn.execute("INSERT INTO greenfield_operations "
                 "(id, idempotency_key, service_id, rollout_id, data) VALUES (?, ?, ?, ?, ?) "
                 "ON CONFLICT (id) DO UPDATE SET data = excluded.data",
                 (operation["id"], operation["data"]["idempotencyKey"], service_id, rollout_id,
                  canonical(operation["data"])))


def load_operation(conn: sqlite3.Connection, *, operation_id: str | None = None,
                   idempotency_key: str | None = None) -> tuple[JsonDict, str, str] | None:
    """An operation by id or by key, with its service id and rollout id."""
    column, value = (("id", operation_id) if operation_id is not None
                     else ("idempotency_key", idempotency_key))
    row = conn.execute(f"SELECT id, service_id, rollout_id, data FROM greenfield_operations "
                       f"WHERE {column} = ?", (value,)).fetchone()
    if row is None:
        return None
    return {"id": row[0], "data": json.loads(row[3])}, str(row[1]), str(row[2])


def operation_ids_of(conn: sqlite3.Connection, service_id: str) -> list[str]:
    rows = conn.execute("SELECT id FROM greenfield_operations WHERE service_id = ? ORDER BY id",
                        (service_id,)).fetchall()
    return [str(r[0]) for r in rows]
