require ["envelope", "fileinto"];
if envelope :is "from" "sender@example.org" { fileinto "EnvFrom"; }
if envelope :domain "to" "example.com" { fileinto "EnvToDomain"; }
if envelope :is "from" "" { fileinto "NullSender"; }
if envelope :localpart "from" "owner-dev" { fileinto "Owner"; }
