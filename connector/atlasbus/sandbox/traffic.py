"""Realistic ATLAS bus traffic, with a share of malformed entries: for the demo and benchmarks.

Traffic follows checkout flows: an order is placed (``orders``), paid (``payments``) and shipped
(``shipments``); the three messages of a flow share one correlation ID and one trace. Priorities,
tracing and metadata look like what the bus's services publish (wire format:
docs/wire-format.md). A chosen share of entries is broken the way real producers break them (a
truncated payload, a priority written as a word, a missing field, Latin-1 bytes, a tracing map in
the wrong format, ...); each such entry records the decoder's reason code it should get, so a
test or the demo can check that every one ends up as a dead letter with that reason.

Spark-free and deterministic for a given seed (except ``enqueued_time``, which is the clock).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from atlasbus.model.reason_codes import (
    INVALID_INTEGER,
    INVALID_JSON,
    INVALID_TIMESTAMP,
    INVALID_UTF8,
    MISSING_FIELD,
    NOT_JSON_OBJECT,
)

TOPICS = ("orders", "payments", "shipments")
"""The demo's topics, in flow order."""

Fields = dict[str, str | bytes]


@dataclass(frozen=True, slots=True)
class Message:
    """One entry to ``XADD`` to ``{prefix}:{topic}``; ``reason`` is set when it is malformed."""

    topic: str
    fields: Fields
    reason: str | None = None


_CUSTOMERS = 2_000
_SKUS = ("sku-1001", "sku-1002", "sku-2040", "sku-3300", "sku-4711", "sku-5150", "sku-7007")
_METHODS = ("card", "card", "card", "sepa", "paypal", "wallet")
_CARRIERS = ("dhl", "ups", "postnl", "dpd")
_REGIONS = ("eu-west", "eu-central", "us-east")


def _truncated_payload(fields: Fields, rng: random.Random) -> Fields:
    payload = str(fields["payload"])
    return {**fields, "payload": payload[: rng.randint(1, len(payload) - 1)]}


def _payload_not_object(fields: Fields, rng: random.Random) -> Fields:
    return {**fields, "payload": json.dumps([json.loads(str(fields["payload"]))])}


def _priority_word(fields: Fields, rng: random.Random) -> Fields:
    return {**fields, "priority": rng.choice(("high", "urgent", "low", "P1"))}


def _missing_priority(fields: Fields, rng: random.Random) -> Fields:
    return {k: v for k, v in fields.items() if k != "priority"}


def _latin1_payload(fields: Fields, rng: random.Random) -> Fields:
    text = str(fields["payload"]).replace("}", ', "note": "Stra\u00dfe 5"}')
    return {**fields, "payload": text.encode("latin-1")}


def _tracing_as_header(fields: Fields, rng: random.Random) -> Fields:
    trace = json.loads(str(fields["tracing"]))
    return {**fields, "tracing": f"traceparent={trace['traceparent']}"}


def _enqueued_as_date(fields: Fields, rng: random.Random) -> Fields:
    return {**fields, "enqueued_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# How producers break entries, and the reason code the source's decoder gives each.
MALFORMATIONS: tuple[tuple[str, Callable[[Fields, random.Random], Fields]], ...] = (
    (INVALID_JSON, _truncated_payload),
    (NOT_JSON_OBJECT, _payload_not_object),
    (INVALID_INTEGER, _priority_word),
    (MISSING_FIELD, _missing_priority),
    (INVALID_UTF8, _latin1_payload),
    (INVALID_JSON, _tracing_as_header),
    (INVALID_TIMESTAMP, _enqueued_as_date),
)


@dataclass
class TrafficGenerator:
    """An endless, deterministic (per ``seed``) stream of checkout-flow messages.

    ``malformed_share`` of the messages (drawn independently, default 1%) are broken in one of
    the ``MALFORMATIONS`` ways.
    """

    seed: int = 7
    malformed_share: float = 0.01
    _rng: random.Random = field(init=False, repr=False)
    _flows: Iterator[Message] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.malformed_share <= 1.0:
            raise ValueError(f"malformed_share must be within [0, 1], got {self.malformed_share}")
        self._rng = random.Random(self.seed)
        self._flows = self._messages()

    def take(self, count: int) -> list[Message]:
        """The next ``count`` messages."""
        return [next(self._flows) for _ in range(count)]

    def _messages(self) -> Iterator[Message]:
        order_number = 100_000
        while True:
            order_number += 1
            for message in self._flow(order_number):
                if self._rng.random() < self.malformed_share:
                    reason, breaker = self._rng.choice(MALFORMATIONS)
                    message = Message(message.topic, breaker(message.fields, self._rng), reason)
                yield message

    def _flow(self, order_number: int) -> list[Message]:
        rng = self._rng
        correlation_id = uuid.UUID(int=rng.getrandbits(128), version=4).hex
        trace_id = f"{rng.getrandbits(128):032x}"
        region = rng.choice(_REGIONS)
        express = rng.random() < 0.15
        lines = [
            (rng.choice(_SKUS), rng.randint(1, 3), _money(rng, 4, 120))
            for _ in range(rng.randint(1, 4))
        ]
        total = round(sum(qty * price for _, qty, price in lines), 2)
        order_id = f"ord-{order_number}"
        order = {
            "order_id": order_id,
            "customer_id": f"cus-{rng.randint(1, _CUSTOMERS):05d}",
            "lines": [{"sku": sku, "qty": qty, "price": price} for sku, qty, price in lines],
            "total": total,
            "currency": "EUR",
            "express": express,
        }
        declined = rng.random() < 0.03
        payment = {
            "payment_id": f"pay-{order_number}",
            "order_id": order_id,
            "method": rng.choice(_METHODS),
            "amount": total,
            "currency": "EUR",
            "status": "declined" if declined else "captured",
        }
        shipment = {
            "shipment_id": f"shp-{order_number}",
            "order_id": order_id,
            "carrier": rng.choice(_CARRIERS),
            "parcels": rng.randint(1, 3),
            "service": "express" if express else "standard",
        }
        return [
            self._message("orders", order, 2 if express else 5, "checkout", correlation_id,
                          trace_id, region),
            self._message("payments", payment, 1 if declined else 3, "payments",
                          correlation_id, trace_id, region),
            self._message("shipments", shipment, 4 if express else 7, "fulfilment",
                          correlation_id, trace_id, region),
        ]  # fmt: skip

    def _message(
        self,
        topic: str,
        payload: dict[str, object],
        priority: int,
        service: str,
        correlation_id: str,
        trace_id: str,
        region: str,
    ) -> Message:
        rng = self._rng
        # Upstream retries: a few messages were delivered before and are published again.
        attempts = 0 if rng.random() < 0.97 else rng.randint(1, 3)
        tracing = {
            "traceparent": f"00-{trace_id}-{rng.getrandbits(64):016x}-01",
            "service": f"{service}-svc",
        }
        metadata = {
            "producer": f"{service}-svc/2.{rng.randint(3, 4)}",
            "schema": f"{topic}.v2",
            "region": region,
        }
        fields: Fields = {
            "topic": topic,
            "priority": str(priority),
            "payload": json.dumps(payload, separators=(",", ":")),
            "correlation_id": correlation_id,
            "tracing": json.dumps(tracing, separators=(",", ":")),
            "metadata": json.dumps(metadata, separators=(",", ":")),
            "delivery_attempts": str(attempts),
            "enqueued_time": f"{time.time():.6f}",
        }
        return Message(topic, fields)


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)
