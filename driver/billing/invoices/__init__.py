"""Invoices as documents (docs/invoices.md): amounts formatted by currency, the HTML and PDF
renderings of `billing.get_invoice_document`, and the report figures' formatting."""
