"""The storage plugin: the mail schema on HBase's data model, and mail semantics over it."""
