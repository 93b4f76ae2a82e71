"""twistd plugin: ``twistd -n --reactor=asyncio imapserver [imapserver options]``."""

from twisted.application.service import ServiceMaker

imapserver = ServiceMaker("hbase-imap server", "imapserver.tap",
                          "IMAP, SMTP and LMTP over the HBase mail store", "imapserver")
