"""The mail store's error taxonomy.

These are domain errors: they say what went wrong in mail terms and carry no protocol codes.
Only the protocol edges (``imapserver``) turn them into IMAP ``NO``/``BAD`` responses or SMTP
replies, and ``mailadmin`` into messages and exit codes.
"""


class MailStoreError(Exception):
    """Base of every error the mail store raises on purpose."""


class WriteRefused(MailStoreError):
    """A write attempted inside ``Backend.reads_only()``: the caller runs the call again
    where writes may wait (the IMAP server: in a worker thread instead of its reactor's)."""


class NotFound(MailStoreError):
    """A user, mailbox or message that does not exist (or is not visible to the caller)."""


class Expunged(NotFound):
    """A message the caller had looked up was expunged (by another session or process) before
    its content could be read, and its content is gone.

    RFC 2180 4.1 leaves the server a choice when a session fetches a message it has not yet
    been told is expunged; this one says the data can no longer be served.  Content stays
    readable for a grace period after its last message goes (docs/decisions/0011), so this is
    raised only to a reader slower than that.
    """


class AlreadyExists(MailStoreError):
    """A user or mailbox name that is already taken."""


class InvalidName(MailStoreError):
    """A user or mailbox name that the store refuses (empty, bad characters, too long, ...)."""


class PermissionDenied(MailStoreError):
    """The caller may see the mailbox but its ACL does not grant what the operation needs
    (RFC 4314).  A mailbox the caller may not even see raises NotFound instead, with the
    text a mailbox that does not exist would get, so that nothing tells the two apart."""


class TooLarge(MailStoreError):
    """A message over the configured size limit."""


class OverQuota(MailStoreError):
    """The change would take a user over their storage or message quota."""


class Conflict(MailStoreError):
    """A concurrent change won a race that could not be retried (the caller may try again)."""


class BackendUnavailable(MailStoreError):
    """The storage backend cannot be reached or failed; nothing was committed by this call
    (except as :class:`Unpublished` says).

    ``unsent`` is true when the request is known never to have reached the backend (no
    connection could be made): only then is it safe to replay a non-idempotent write such as
    a counter increment.  False means "unknown" -- a call cut off mid-way may have been applied.
    """

    def __init__(self, *args: object, unsent: bool = False):
        super().__init__(*args)
        self.unsent = unsent


class Unpublished(BackendUnavailable):
    """The backend failed after a new message was committed, before it was made visible.

    The message stays, and so must its content: the next append to the mailbox (or fsck)
    moves the mailbox's watermark past it.  ``uid`` is its UID.  Callers report a temporary
    failure all the same; a client that retries may end up with the message twice, never
    with none.
    """

    def __init__(self, message: str, uid: int):
        super().__init__(message)
        self.uid = uid


class SharedPermissions(MailStoreError):
    """A store directory or file that users other than its owner can reach (group or world
    permission bits), refused unless the configuration allows it: the store holds every user's
    mail and password hash.  The message names the path and its mode."""


class InvalidAddress(MailStoreError):
    """An envelope address the outgoing queue refuses: empty where one is needed, or holding
    characters that could end an SMTP command line or inject another (CR, LF, NUL, ``<``,
    ``>``; RFC 5321 4.1.2)."""


class Rejected(MailStoreError):
    """The recipient's own filter refused the message (Sieve reject/ereject, RFC 5429);
    ``reason`` is the text the script gave, for the sender."""

    def __init__(self, reason: str):
        super().__init__(f"rejected by the recipient's Sieve script: {reason}")
        self.reason = reason
