"""A card the customer adds on the portal: a Stripe SetupIntent (docs/customers.md, "The portal").

    outcome = await add(database, provider, customer_id, "pm_card_visa", nonce=..., return_url=..., now=..., actor=...)
    # ("added", None) | ("action", url of the bank's page) | ("declined", None)
    outcome = await finish(database, provider, customer_id, "seti_...", now=..., actor=...)   # after the bank's page

The SetupIntent is created and confirmed in one call whose idempotency key is the form's nonce
(the same form sent twice is one SetupIntent); it carries metadata[customer_id], and `finish`
stores a SetupIntent's card only when that is the session's customer and Stripe says `succeeded`.
The card becomes the customer's payment method (billing.set_payment_method: the default), audited
as the customer's portal session. The provider's customer is made once per customer (Stripe's
idempotency key `portal-customer-<id>`) unless a card of theirs already names one."""

from __future__ import annotations

from billing import db

# Stripe's test payment methods the portal offers with a test key (sk_test_...): collecting card
# numbers needs Stripe.js in the browser, which the portal does not load (see docs/customers.md).
TEST_CARDS = ("pm_card_visa", "pm_card_mastercard", "pm_card_amex", "pm_card_chargeDeclinedInsufficientFunds")


async def _store(database, provider, customer_id: int, customer_ref: str, setup: dict, *, now, actor) -> str:
    pm_id = setup.get("payment_method")
    pm_id = pm_id.get("id") if isinstance(pm_id, dict) else pm_id
    method = await provider.retrieve_payment_method(str(pm_id))
    card = method.get("card") or {}
    await database.mutate(actor, db.SET_PAYMENT_METHOD, {
        "customer_id": customer_id, "provider": "stripe", "customer_ref": customer_ref,
        "payment_method_ref": method["id"], "brand": card.get("brand"), "last4": card.get("last4"),
        "exp_month": int(card.get("exp_month") or 0), "exp_year": int(card.get("exp_year") or 0), "now": now})
    return "added"


async def add(database, provider, customer_id: int, payment_method: str, *, nonce: str, return_url: str,
              email: str | None, customer_ref: str | None, now, actor) -> tuple[str, str | None]:
    ref = customer_ref or await provider.create_customer(customer_id, email, key=f"portal-customer-{customer_id}")
    setup = await provider.setup_card(ref, customer_id, payment_method, return_url=return_url,
                                      key=f"portal-setup-{customer_id}-{nonce}")
    status = setup.get("status")
    if status == "succeeded":
        return await _store(database, provider, customer_id, ref, setup, now=now, actor=actor), None
    if status == "requires_action":
        url = ((setup.get("next_action") or {}).get("redirect_to_url") or {}).get("url")
        if url:
            return "action", url
    return "declined", None


async def finish(database, provider, customer_id: int, setup_intent_id: str, *, now, actor) -> str:
    """After the bank's page: the SetupIntent as Stripe has it; stored only if it is this customer's
    and succeeded ("added"), else "pending" / "declined"; another customer's: "not_found"."""
    setup = await provider.retrieve_setup_intent(setup_intent_id)
    if str((setup.get("metadata") or {}).get("customer_id")) != str(customer_id):
        return "not_found"
    if setup.get("status") == "succeeded":
        return await _store(database, provider, customer_id, str(setup.get("customer")), setup, now=now, actor=actor)
    return "pending" if setup.get("status") in ("processing", "requires_action") else "declined"
