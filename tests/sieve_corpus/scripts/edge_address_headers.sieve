require ["fileinto", "relational"];
if address :domain :is "x-original-to" "example.com" { fileinto "OrigTo"; }
if address :count "eq" "delivered-to" "0" { fileinto "NoDeliveredTo"; }
if address :contains ["resent-reply-to", "errors-to", "x-beenthere"] "a" { fileinto "Never"; }
