"""Emails to customers (docs/customers.md): what is owed is written by the SQL API
(`billing.notification`), composed here in the customer's language (`compose`, `i18n`), sent by
the worker over SMTP (`mailer`, `billing.worker.notifications`)."""

KINDS = ("INVOICE_ISSUED", "PAYMENT_SUCCEEDED", "PAYMENT_FAILED", "ACTION_REQUIRED", "CARD_EXPIRING",
         "TRIAL_ENDING", "UPCOMING_RENEWAL", "SUBSCRIPTION_CANCELED", "REFUND_ISSUED")
# Part of the customer's records (or needed to pay): never turned off (billing.notification_kinds).
LEGAL_KINDS = frozenset({"INVOICE_ISSUED", "PAYMENT_SUCCEEDED", "REFUND_ISSUED", "ACTION_REQUIRED"})
