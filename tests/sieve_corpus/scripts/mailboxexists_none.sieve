require ["fileinto", "mailbox"];
if mailboxexists "Nonexistent" { fileinto "Nonexistent"; } else { fileinto :create "Made"; }
