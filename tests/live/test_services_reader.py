"""``getServices`` has two readers (``shell.controlplane.wire.services_answer``): the
chunked one (``msgspec`` reads the frame, the services are decoded later by
``ServicesReply`` 500 at a time from their own bytes, ``ServiceList.chunks``) and the
envelope's own, which decodes the reply whole.
They must give the same answer for every reply -- the same services, raw where one does
not fit, the same ``etag`` and ``notModified``, the same refusal -- so the chunked one is
checked against the whole one on a well-formed reply, on the odd replies it must hand
over, and on randomly damaged copies of a reply."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from pydantic import ValidationError

from reconciler.core.wireshape import decode
from reconciler.shell.controlplane import client, envelope, wire
from reconciler.shell.controlplane.envelope import _envelope_of
from reconciler.shell.controlplane.wire import (
    ServiceList,
    ServicesReply,
    ServiceWire,
    services_answer,
)


def _service(number: int) -> dict[str, Any]:
    sid = f"svc-{number:04d}"
    return {"id": sid, "data": {
        "name": f"s{number}", "appId": f"a{number}", "immutableImageRequired": True,
        "egress": [{"host": "api.example.net", "port": 443}], "egressRevision": 1,
        "ignored": {"deep": [1, 2, {"x": None}]},
        "imageDeployment": {"rolloutId": f"ro-{number}", "rolloutGeneration": 1,
                            "releaseId": f"rel-{number}", "requestedDigest": "sha256:" + "a" * 64,
                            "mode": "promotion", "createdAt": 5,
                            "targetScope": {"targetClusterIds": ["c1", "c2"],
                                            "requiredReplicaCount": 4}},
        "imageRolloutStatus": {"rolloutId": f"ro-{number}", "rolloutGeneration": 1,
                               "expectedDigest": "sha256:" + "a" * 64, "status": "succeeded"}}}


def _reply(count: int = 1_200, **response: Any) -> bytes:
    services: list[Any] = [_service(n) for n in range(count)]
    services[3]["data"]["egressRevision"] = "two"  # does not fit: kept raw
    services[7]["data"]["name"] = 7  # does not fit either
    body = {"services": services, "etag": "e-1", **response}
    return json.dumps({"method": "getServices", "request": {}, "response": body,
                       "correlation": {"id": "uni_x", "phase": "response"}}).encode()


def _whole(content: bytes) -> object:
    """What the envelope's own reader makes of ``content`` (the reply decoded whole): the
    answer, or None for the envelope to read it whole and say what it is."""
    try:
        reply = decode(_envelope_of(ServicesReply), content)
    except ValidationError:
        return None
    response = getattr(reply, "response", None)
    if getattr(reply, "error", None) is not None or getattr(reply, "retry", None) is not None \
            or not isinstance(response, ServicesReply):
        return None
    return response


def _outcome(reply: object) -> object:
    """A reply as its reader hands it on: the services as ``ServiceList`` builds them."""
    if isinstance(reply, ServicesReply):
        services = list(ServiceList(reply))
        dumped = {**reply.model_dump(exclude={"services"}),
                  "services": [s if isinstance(s, dict) else s.model_dump() for s in services]}
        return (dumped, sorted(reply.model_fields_set), [type(s).__name__ for s in services])
    return reply


def test_a_plain_reply_is_read_in_chunks_as_the_whole_reader_reads_it() -> None:
    content = _reply()
    fast = services_answer(content)
    assert fast is not None  # framed, not handed over
    assert fast.services == []  # nothing built yet
    listed = ServiceList(fast)
    chunks = list(listed.chunks())
    assert [len(c) for c in chunks] == [500, 500, 200] \
        and wire.SERVICES_CHUNK == 500  # built a chunk at a time
    assert list(listed.chunks()) == []  # read once: the reply's bytes are let go
    assert isinstance(chunks[0][0], ServiceWire) and isinstance(chunks[0][3], dict)
    assert isinstance(chunks[0][7], dict)
    assert _outcome(fast) == _outcome(_whole(content))
    assert fast.model_fields_set == {"services", "etag"}
    # the client registers it, and the envelope asks it first
    assert client.ServicesReply is ServicesReply
    assert envelope._FAST_ANSWERS[ServicesReply] is services_answer
    assert _outcome(envelope.answer_as("getServices", content, ServicesReply)) == \
        _outcome(fast)


@pytest.mark.parametrize("content", [
    _reply(10, not_modified=True),  # a snake-case key: the models read it as the field
    _reply(10).replace(b'"etag": "e-1"', b'"etag": "\\u00e9"').replace(b"s1", "é".encode()),
    json.dumps({"error": {"code": "X"}, "response": None}).encode(),
    json.dumps({"retry": {"waitForMs": 5}}).encode(),
    json.dumps({"response": {"services": None}}).encode(),
    json.dumps({"response": {"services": "no"}}).encode(),
    json.dumps({"response": {"services": [1, 2]}}).encode(),  # not objects: refused whole
    json.dumps({"response": None}).encode(),
    json.dumps([1]).encode(),
    b'{"response": {"services": [',
])
def test_what_the_chunked_reader_does_not_read_plainly_it_hands_over(content: bytes) -> None:
    assert services_answer(content) is None
    assert _outcome(envelope.answer_as("getServices", content, ServicesReply)) == \
        _outcome(_whole(content))


def test_randomly_damaged_replies_are_read_the_same_by_both_readers() -> None:
    rng = random.Random(22)
    base = _reply(60, notModified=False)
    alphabet = b'{}[]",:0123456789 nulltruefalse\\\x00\xc3\xa9'
    fast = 0
    for _ in range(400):
        damaged = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(damaged))
            match rng.randrange(3):
                case 0:
                    damaged[at] = rng.choice(alphabet)
                case 1:
                    del damaged[at:at + rng.randint(1, 40)]
                case _:
                    damaged[at:at] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        content = bytes(damaged)
        fast += services_answer(content) is not None
        assert _outcome(envelope.answer_as("getServices", content, ServicesReply)) == \
            _outcome(_whole(content)), content[:200]
    assert 40 < fast < 360  # both readers were exercised
