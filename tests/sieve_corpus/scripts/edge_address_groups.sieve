require ["fileinto", "relational"];
if address :count "eq" "to" "0" { fileinto "NoToAddress"; }
if address :all :is "bcc" "user@example.com" { fileinto "BccUser"; }
if address :localpart :matches "from" "*-*" { fileinto "Hyphen"; }
if address :domain :is "from" "" { fileinto "EmptyDomain"; }
