""" Contains all the data models used in inputs/outputs """

from .apply_coupon_body import ApplyCouponBody
from .archive_coupon_body import ArchiveCouponBody
from .archive_plan_body import ArchivePlanBody
from .cancel_subscription_body import CancelSubscriptionBody
from .change_plan_body import ChangePlanBody
from .change_plan_body_when import ChangePlanBodyWhen
from .coupon import Coupon
from .coupon_duration import CouponDuration
from .create_customer_body import CreateCustomerBody
from .create_customer_body_tax_status_type_1 import CreateCustomerBodyTaxStatusType1
from .create_customer_body_tax_status_type_2_type_1 import CreateCustomerBodyTaxStatusType2Type1
from .create_customer_body_tax_status_type_3_type_1 import CreateCustomerBodyTaxStatusType3Type1
from .create_plan_body import CreatePlanBody
from .create_plan_body_billing_interval import CreatePlanBodyBillingInterval
from .create_portal_link_body import CreatePortalLinkBody
from .create_portal_link_response_201 import CreatePortalLinkResponse201
from .create_refund_body import CreateRefundBody
from .create_subscription_body import CreateSubscriptionBody
from .create_subscriptions_body import CreateSubscriptionsBody
from .create_subscriptions_body_signups_item import CreateSubscriptionsBodySignupsItem
from .create_subscriptions_response_200 import CreateSubscriptionsResponse200
from .create_subscriptions_response_200_data_item import CreateSubscriptionsResponse200DataItem
from .create_subscriptions_response_200_data_item_outcome import CreateSubscriptionsResponse200DataItemOutcome
from .create_usage_alert_body import CreateUsageAlertBody
from .create_webhook_endpoint_body import CreateWebhookEndpointBody
from .credit_note import CreditNote
from .customer import Customer
from .customer_tax_status import CustomerTaxStatus
from .error import Error
from .error_error import ErrorError
from .event import Event
from .event_payload import EventPayload
from .get_customer_usage_response_200 import GetCustomerUsageResponse200
from .get_customer_usage_response_200_meters_item import GetCustomerUsageResponse200MetersItem
from .get_upcoming_invoice_response_200 import GetUpcomingInvoiceResponse200
from .get_upcoming_invoice_response_200_lines_item import GetUpcomingInvoiceResponse200LinesItem
from .get_upcoming_invoice_response_200_lines_item_kind import GetUpcomingInvoiceResponse200LinesItemKind
from .ingest_usage_events_body_item import IngestUsageEventsBodyItem
from .ingest_usage_events_body_item_data_type_0 import IngestUsageEventsBodyItemDataType0
from .ingest_usage_events_response_200 import IngestUsageEventsResponse200
from .ingest_usage_events_response_200_results_item import IngestUsageEventsResponse200ResultsItem
from .ingest_usage_events_response_200_results_item_reason import IngestUsageEventsResponse200ResultsItemReason
from .ingest_usage_events_response_200_results_item_status import IngestUsageEventsResponse200ResultsItemStatus
from .invoice import Invoice
from .invoice_document import InvoiceDocument
from .invoice_document_bill_to import InvoiceDocumentBillTo
from .invoice_document_credit_notes_item import InvoiceDocumentCreditNotesItem
from .invoice_document_lines_item import InvoiceDocumentLinesItem
from .invoice_document_taxes_item import InvoiceDocumentTaxesItem
from .invoice_kind import InvoiceKind
from .invoice_status import InvoiceStatus
from .list_all_refunds_response_200 import ListAllRefundsResponse200
from .list_coupons_archived import ListCouponsArchived
from .list_coupons_response_200 import ListCouponsResponse200
from .list_credit_notes_response_200 import ListCreditNotesResponse200
from .list_customers_response_200 import ListCustomersResponse200
from .list_events_response_200 import ListEventsResponse200
from .list_invoice_lines_response_200 import ListInvoiceLinesResponse200
from .list_invoice_lines_response_200_data_item import ListInvoiceLinesResponse200DataItem
from .list_invoices_response_200 import ListInvoicesResponse200
from .list_invoices_status import ListInvoicesStatus
from .list_payment_methods_response_200 import ListPaymentMethodsResponse200
from .list_plans_archived import ListPlansArchived
from .list_plans_response_200 import ListPlansResponse200
from .list_refunds_response_200 import ListRefundsResponse200
from .list_subscriptions_response_200 import ListSubscriptionsResponse200
from .list_subscriptions_response_200_data_item import ListSubscriptionsResponse200DataItem
from .list_subscriptions_status import ListSubscriptionsStatus
from .list_tax_rates_response_200 import ListTaxRatesResponse200
from .list_usage_alerts_response_200 import ListUsageAlertsResponse200
from .list_webhook_attempts_response_200 import ListWebhookAttemptsResponse200
from .list_webhook_endpoints_response_200 import ListWebhookEndpointsResponse200
from .new_plan_price_body import NewPlanPriceBody
from .open_customer_session_body import OpenCustomerSessionBody
from .open_customer_session_response_201 import OpenCustomerSessionResponse201
from .openapi_response_200 import OpenapiResponse200
from .pause_subscription_body import PauseSubscriptionBody
from .payment_method import PaymentMethod
from .payment_method_status import PaymentMethodStatus
from .payment_webhook_body import PaymentWebhookBody
from .payment_webhook_body_status import PaymentWebhookBodyStatus
from .payment_webhook_response_200 import PaymentWebhookResponse200
from .plan import Plan
from .reactivate_subscription_body import ReactivateSubscriptionBody
from .read_audit_response_200 import ReadAuditResponse200
from .read_audit_response_200_entries_item import ReadAuditResponse200EntriesItem
from .refund import Refund
from .refund_status import RefundStatus
from .report import Report
from .report_data_item import ReportDataItem
from .report_report import ReportReport
from .resume_subscription_body import ResumeSubscriptionBody
from .retry_invoice_body import RetryInvoiceBody
from .set_payment_method_body import SetPaymentMethodBody
from .set_quantity_body import SetQuantityBody
from .stripe_webhook_body import StripeWebhookBody
from .stripe_webhook_body_data import StripeWebhookBodyData
from .stripe_webhook_response_200 import StripeWebhookResponse200
from .subscription import Subscription
from .subscription_status import SubscriptionStatus
from .tax_rate import TaxRate
from .uncancel_subscription_body import UncancelSubscriptionBody
from .update_customer_body import UpdateCustomerBody
from .update_customer_body_tax_status_type_1 import UpdateCustomerBodyTaxStatusType1
from .update_customer_body_tax_status_type_2_type_1 import UpdateCustomerBodyTaxStatusType2Type1
from .update_customer_body_tax_status_type_3_type_1 import UpdateCustomerBodyTaxStatusType3Type1
from .update_plan_body import UpdatePlanBody
from .update_usage_alert_body import UpdateUsageAlertBody
from .upsert_coupon_body import UpsertCouponBody
from .upsert_coupon_body_duration import UpsertCouponBodyDuration
from .upsert_coupon_response_200 import UpsertCouponResponse200
from .upsert_coupon_response_200_duration import UpsertCouponResponse200Duration
from .upsert_tax_rate_body import UpsertTaxRateBody
from .usage_alert import UsageAlert
from .void_invoice_body import VoidInvoiceBody
from .webhook_attempt import WebhookAttempt
from .webhook_attempt_delivery_status import WebhookAttemptDeliveryStatus
from .webhook_endpoint import WebhookEndpoint
from .webhook_endpoint_status import WebhookEndpointStatus

__all__ = (
    "ApplyCouponBody",
    "ArchiveCouponBody",
    "ArchivePlanBody",
    "CancelSubscriptionBody",
    "ChangePlanBody",
    "ChangePlanBodyWhen",
    "Coupon",
    "CouponDuration",
    "CreateCustomerBody",
    "CreateCustomerBodyTaxStatusType1",
    "CreateCustomerBodyTaxStatusType2Type1",
    "CreateCustomerBodyTaxStatusType3Type1",
    "CreatePlanBody",
    "CreatePlanBodyBillingInterval",
    "CreatePortalLinkBody",
    "CreatePortalLinkResponse201",
    "CreateRefundBody",
    "CreateSubscriptionBody",
    "CreateSubscriptionsBody",
    "CreateSubscriptionsBodySignupsItem",
    "CreateSubscriptionsResponse200",
    "CreateSubscriptionsResponse200DataItem",
    "CreateSubscriptionsResponse200DataItemOutcome",
    "CreateUsageAlertBody",
    "CreateWebhookEndpointBody",
    "CreditNote",
    "Customer",
    "CustomerTaxStatus",
    "Error",
    "ErrorError",
    "Event",
    "EventPayload",
    "GetCustomerUsageResponse200",
    "GetCustomerUsageResponse200MetersItem",
    "GetUpcomingInvoiceResponse200",
    "GetUpcomingInvoiceResponse200LinesItem",
    "GetUpcomingInvoiceResponse200LinesItemKind",
    "IngestUsageEventsBodyItem",
    "IngestUsageEventsBodyItemDataType0",
    "IngestUsageEventsResponse200",
    "IngestUsageEventsResponse200ResultsItem",
    "IngestUsageEventsResponse200ResultsItemReason",
    "IngestUsageEventsResponse200ResultsItemStatus",
    "Invoice",
    "InvoiceDocument",
    "InvoiceDocumentBillTo",
    "InvoiceDocumentCreditNotesItem",
    "InvoiceDocumentLinesItem",
    "InvoiceDocumentTaxesItem",
    "InvoiceKind",
    "InvoiceStatus",
    "ListAllRefundsResponse200",
    "ListCouponsArchived",
    "ListCouponsResponse200",
    "ListCreditNotesResponse200",
    "ListCustomersResponse200",
    "ListEventsResponse200",
    "ListInvoiceLinesResponse200",
    "ListInvoiceLinesResponse200DataItem",
    "ListInvoicesResponse200",
    "ListInvoicesStatus",
    "ListPaymentMethodsResponse200",
    "ListPlansArchived",
    "ListPlansResponse200",
    "ListRefundsResponse200",
    "ListSubscriptionsResponse200",
    "ListSubscriptionsResponse200DataItem",
    "ListSubscriptionsStatus",
    "ListTaxRatesResponse200",
    "ListUsageAlertsResponse200",
    "ListWebhookAttemptsResponse200",
    "ListWebhookEndpointsResponse200",
    "NewPlanPriceBody",
    "OpenapiResponse200",
    "OpenCustomerSessionBody",
    "OpenCustomerSessionResponse201",
    "PauseSubscriptionBody",
    "PaymentMethod",
    "PaymentMethodStatus",
    "PaymentWebhookBody",
    "PaymentWebhookBodyStatus",
    "PaymentWebhookResponse200",
    "Plan",
    "ReactivateSubscriptionBody",
    "ReadAuditResponse200",
    "ReadAuditResponse200EntriesItem",
    "Refund",
    "RefundStatus",
    "Report",
    "ReportDataItem",
    "ReportReport",
    "ResumeSubscriptionBody",
    "RetryInvoiceBody",
    "SetPaymentMethodBody",
    "SetQuantityBody",
    "StripeWebhookBody",
    "StripeWebhookBodyData",
    "StripeWebhookResponse200",
    "Subscription",
    "SubscriptionStatus",
    "TaxRate",
    "UncancelSubscriptionBody",
    "UpdateCustomerBody",
    "UpdateCustomerBodyTaxStatusType1",
    "UpdateCustomerBodyTaxStatusType2Type1",
    "UpdateCustomerBodyTaxStatusType3Type1",
    "UpdatePlanBody",
    "UpdateUsageAlertBody",
    "UpsertCouponBody",
    "UpsertCouponBodyDuration",
    "UpsertCouponResponse200",
    "UpsertCouponResponse200Duration",
    "UpsertTaxRateBody",
    "UsageAlert",
    "VoidInvoiceBody",
    "WebhookAttempt",
    "WebhookAttemptDeliveryStatus",
    "WebhookEndpoint",
    "WebhookEndpointStatus",
)
