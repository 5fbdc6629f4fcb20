"""The HTTP API (`billing serve`): routes in `app`, input checks in `validation`, gateway
webhook signatures in `webhooks`, the OpenAPI description in `openapi`."""

from billing.api.app import create_app, serve
from billing.api.openapi import OPENAPI
from billing.api.validation import ApiError, error_response, subscription_json
from billing.api.webhooks import sign, verify_signature

__all__ = ["OPENAPI", "ApiError", "create_app", "error_response", "serve", "sign", "subscription_json",
           "verify_signature"]
