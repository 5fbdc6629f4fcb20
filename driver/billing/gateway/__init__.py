"""The payment gateway: the client the charge workers use and a simulator that speaks the same protocol."""

from billing.gateway.client import ChargeResult, GatewayClient, NotSent, RateLimited

__all__ = ["ChargeResult", "GatewayClient", "NotSent", "RateLimited"]
