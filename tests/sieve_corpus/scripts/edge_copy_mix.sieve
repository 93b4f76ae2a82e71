require ["copy", "fileinto", "imap4flags"];
fileinto :copy :flags "\\Seen" "Archive";
redirect :copy "audit@example.net";
if header :contains "subject" "sale" { discard; }
