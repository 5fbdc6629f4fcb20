"""The customer portal (docs/customers.md): its payment page for an authentication (`payments`); the links it is reached by are billing.notifications.links."""
