"""SMTP: BILLING_SMTP_URL says where, and how securely.

* `smtp://host:587` - STARTTLS is required: a server that does not offer it is refused (the
  message is not sent in clear text); `smtps://host:465` - TLS from the first byte.
* The certificate is verified (the system's authorities, or BILLING_SMTP_CA_FILE for a private
  one, as the tests do with Mailpit's).
* Credentials: the URL's user (or BILLING_SMTP_USERNAME) and BILLING_SMTP_PASSWORD, or better
  BILLING_SMTP_PASSWORD_FILE; the password is never in the URL.
* `smtp+insecure://` - no TLS at all, for a relay on loopback only (refused for any other host).

smtplib is synchronous: the worker calls `send` in a thread (asyncio.to_thread).
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid
from urllib.parse import unquote, urlsplit

from billing.notifications.compose import Email


class SmtpConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    mode: str  # starttls, tls, insecure
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    timeout: float = 20.0

    @classmethod
    def from_url(cls, url: str, *, username: str | None = None, password: str | None = None,
                 ca_file: str | None = None, timeout: float = 20.0) -> "SmtpTarget":
        parts = urlsplit(url)
        mode = {"smtp": "starttls", "smtps": "tls", "smtp+insecure": "insecure"}.get(parts.scheme)
        if mode is None or not parts.hostname:
            raise SmtpConfigError("BILLING_SMTP_URL must be smtp://host[:port], smtps://host[:port] or smtp+insecure://127.0.0.1[:port]")
        if parts.password:
            raise SmtpConfigError("put the SMTP password in BILLING_SMTP_PASSWORD_FILE, not in BILLING_SMTP_URL")
        if mode == "insecure" and parts.hostname not in ("127.0.0.1", "::1", "localhost"):
            raise SmtpConfigError("smtp+insecure:// is for a relay on loopback only")
        port = parts.port or {"starttls": 587, "tls": 465, "insecure": 25}[mode]
        return cls(parts.hostname, port, mode, username or (unquote(parts.username) if parts.username else None),
                   password, ca_file, timeout)

    @classmethod
    def from_settings(cls, settings) -> "SmtpTarget":
        return cls.from_url(settings.smtp_url, username=settings.smtp_username, password=settings.smtp_password,
                            ca_file=settings.smtp_ca_file, timeout=settings.smtp_timeout_seconds)


def build_message(email: Email, *, sender: str, sender_name: str, message_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = formataddr((sender_name, sender))
    msg["To"] = email.to
    msg["Subject"] = email.subject
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = message_id
    msg["Auto-Submitted"] = "auto-generated"
    if email.kind:
        msg["X-Billing-Notification"] = email.kind
    msg.set_content(email.text)
    msg.add_alternative(email.html, subtype="html")
    for filename, mime, data in email.attachments:
        maintype, subtype = mime.split("/", 1)
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    msg["Content-Language"] = email.locale  # after the parts: set_content drops Content-* headers
    return msg


def message_id_for(customer_id: int, notification_id: int, sender: str) -> str:
    """The same for every try of one notification: a resend after a crash is recognisably the same message."""
    domain = sender.rpartition("@")[2] or "billing.invalid"
    return f"<notification.{customer_id}.{notification_id}@{domain}>"


def send(target: SmtpTarget, msg: EmailMessage) -> None:
    """Deliver one message; raises on any failure (refused connection, no STARTTLS, auth, rejection)."""
    context = ssl.create_default_context(cafile=target.ca_file) if target.mode != "insecure" else None
    if target.mode == "tls":
        client = smtplib.SMTP_SSL(target.host, target.port, timeout=target.timeout, context=context)
    else:
        client = smtplib.SMTP(target.host, target.port, timeout=target.timeout)
    with client:
        client.ehlo()
        if target.mode == "starttls":
            if not client.has_extn("starttls"):
                raise smtplib.SMTPNotSupportedError("the SMTP server does not offer STARTTLS; refusing to send in clear")
            client.starttls(context=context)
            client.ehlo()
        if target.username:
            client.login(target.username, target.password or "")
        refused = client.send_message(msg)
        if refused:
            raise smtplib.SMTPRecipientsRefused(refused)


__all__ = ["SmtpTarget", "SmtpConfigError", "build_message", "message_id_for", "send", "make_msgid"]
