"""The gateway simulator's webhooks (billing.gateway.simulator, docs/gateway.md): each charge announced
by a signed POST after a random delay, sometimes twice, retried on failure; mixed into
GatewaySimulator (its state: `webhook_url`, `webhook_secret`, `webhook_delay_ms`,
`webhook_duplicate_rate`, `webhook_gate`, `_rng`, `_tasks`, `_session`, `counters`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

from billing import signing
from billing.gateway.records import Charge

log = logging.getLogger("billing.gateway.simulator")

WEBHOOK_MAX_TRIES = 6


class WebhookSender:
    def _announce(self, charge: Charge, suffix: str = "") -> None:
        if not self.webhook_url:
            return
        self._event_seq += 1
        event = {"eventId": "evt_" + hashlib.sha256(f"{self.seed}:{charge.idempotency_key}:event{suffix}".encode())
                 .hexdigest()[:24],
                 "type": f"charge.{charge.status}", "idempotencyKey": charge.idempotency_key,
                 "status": charge.status, "id": charge.id, "declineCode": charge.decline_code,
                 "amount": charge.amount, "currency": charge.currency, "customerId": charge.customer_id,
                 "created": charge.created}
        copies = 2 if self._rng.random() < self.webhook_duplicate_rate else 1
        for _ in range(copies):
            lo, hi = self.webhook_delay_ms
            delay = self._rng.uniform(lo, hi) / 1000
            task = asyncio.get_running_loop().create_task(self._deliver(event, delay))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, event: dict, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.webhook_gate is None:
            await self._send(event)
        else:
            async with self.webhook_gate:
                await self._send(event)

    async def _send(self, event: dict) -> None:
        body = json.dumps(event, separators=(",", ":")).encode()
        backoff = 0.5
        for attempt in range(1, WEBHOOK_MAX_TRIES + 1):
            self.counters["webhookAttempts"] += 1
            headers = {"Content-Type": "application/json",
                       "Billing-Signature": signing.signature_header(self.webhook_secret, body)}
            try:
                assert self._session is not None
                async with self._session.post(self.webhook_url, data=body, headers=headers) as resp:
                    await resp.read()
                    if 200 <= resp.status < 300:
                        self.counters["webhooksDelivered"] += 1
                        return
                    log.debug("webhook refused", extra={"status": resp.status, "eventId": event["eventId"]})
            except Exception as exc:  # noqa: BLE001 - any failure is retried
                log.debug("webhook delivery failed", extra={"error": repr(exc), "attempt": attempt})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30)
        self.counters["webhooksFailed"] += 1
        log.warning("webhook given up", extra={"eventId": event["eventId"]})
