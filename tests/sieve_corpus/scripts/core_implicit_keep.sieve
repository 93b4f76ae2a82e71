# RFC 5228 2.10.2: no action, implicit keep
