"""The HTTP API (`billing serve`): the app in `app`, its routers (one per resource) in `routes`,
input checks in `validation`, error mapping in `errors`,
serving in `serving`, the OpenAPI description in `openapi`."""

from billing.api.app import create_app
from billing.api.openapi import OPENAPI
from billing.api.serving import serve
from billing.api.validation import ApiError, error_response, subscription_json

__all__ = ["OPENAPI", "ApiError", "create_app", "error_response", "serve", "subscription_json"]
