"""Network servers over the mail store: IMAP4 on Twisted, SMTP and LMTP on aiosmtpd."""
